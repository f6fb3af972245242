//! The convolution algorithm cache (`cudnn::dnn::AlgoCache`): keys, LRU
//! eviction, stats, capacity, threads, and the saved file (round trip,
//! corrupt files rejected as a whole with the file and line named).
//!
//! Needs no library and no device (unit tier).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudnn::Error;
use cudnn::dnn::{
    AlgoCache, AlgoChoice, AlgoKey, CacheSearch, CacheStats, ConvDirection, MathPolicy,
};
use support::*;

fn key(n: i64) -> AlgoKey {
    AlgoKey {
        device: 0,
        direction: ConvDirection::Forward,
        x_type: 0,
        w_type: 0,
        y_type: 0,
        compute_type: 0,
        x_dims: vec![n, 3, 32, 32],
        x_strides: vec![3072, 1024, 32, 1],
        w_dims: vec![16, 3, 3, 3],
        w_format: 0,
        y_dims: vec![n, 16, 32, 32],
        y_strides: vec![16384, 1024, 32, 1],
        pad: vec![1, 1],
        stride: vec![1, 1],
        dilation: vec![1, 1],
        groups: 1,
        mode: 1,
        math: MathPolicy::Default,
        deterministic: false,
        workspace_limit: None,
        search: CacheSearch::Heuristic,
    }
}

fn choice(n: u32) -> AlgoChoice {
    AlgoChoice {
        algo: n,
        math_type: n % 4,
        workspace_bytes: n as usize * 1024,
    }
}

/// A fresh, empty directory for this test binary and `name`.
fn temp_dir(name: &str) -> Result<PathBuf, String> {
    let dir =
        std::env::temp_dir().join(format!("cudnn-rs-algo-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// One variant of the base key per field, each changing only that field.
fn one_field_variants() -> Vec<(&'static str, AlgoKey)> {
    let base = key(8);
    // Destructured so that a field added to AlgoKey fails to compile here
    // until it gets a variant below.
    let AlgoKey {
        device: _,
        direction: _,
        x_type: _,
        w_type: _,
        y_type: _,
        compute_type: _,
        x_dims: _,
        x_strides: _,
        w_dims: _,
        w_format: _,
        y_dims: _,
        y_strides: _,
        pad: _,
        stride: _,
        dilation: _,
        groups: _,
        mode: _,
        math: _,
        deterministic: _,
        workspace_limit: _,
        search: _,
    } = &base;
    let v = |name, f: &dyn Fn(&mut AlgoKey)| {
        let mut k = base.clone();
        f(&mut k);
        (name, k)
    };
    vec![
        v("device", &|k| k.device = 1),
        v("direction", &|k| k.direction = ConvDirection::BackwardData),
        v("direction (filter)", &|k| {
            k.direction = ConvDirection::BackwardFilter
        }),
        v("x_type", &|k| k.x_type = 2),
        v("w_type", &|k| k.w_type = 2),
        v("y_type", &|k| k.y_type = 2),
        v("compute_type", &|k| k.compute_type = 1),
        v("x_dims", &|k| k.x_dims[0] = 9),
        v("x_strides", &|k| k.x_strides = vec![3072, 1, 96, 3]),
        v("w_dims", &|k| k.w_dims[2] = 5),
        v("w_format", &|k| k.w_format = 1),
        v("y_dims", &|k| k.y_dims[1] = 17),
        v("y_strides", &|k| k.y_strides[3] = 2),
        v("pad", &|k| k.pad = vec![0, 1]),
        v("stride", &|k| k.stride = vec![1, 2]),
        v("dilation", &|k| k.dilation = vec![2, 1]),
        v("groups", &|k| k.groups = 2),
        v("mode", &|k| k.mode = 0),
        v("math", &|k| k.math = MathPolicy::AllowTf32),
        v("math (tensor cores)", &|k| {
            k.math = MathPolicy::AllowTensorCores
        }),
        v("math (forbid)", &|k| k.math = MathPolicy::ForbidTensorCores),
        v("deterministic", &|k| k.deterministic = true),
        v("workspace_limit", &|k| k.workspace_limit = Some(1 << 20)),
        v("workspace_limit (0)", &|k| k.workspace_limit = Some(0)),
        v("search", &|k| k.search = CacheSearch::Exhaustive),
        v("search (fixed)", &|k| k.search = CacheSearch::Fixed),
    ]
}

fn every_field_matters() -> TestResult {
    let base = key(8);
    let cache = AlgoCache::new(64);
    cache.insert(base.clone(), choice(1));
    ensure!(
        cache.get(&base.clone()) == Some(choice(1)),
        "clone must hit"
    );
    let variants = one_field_variants();
    for (i, (name, k)) in variants.iter().enumerate() {
        ensure!(*k != base, "{name}: equal to the base key");
        ensure!(cache.get(k).is_none(), "{name}: found the base key's entry");
        for (other, k2) in &variants[..i] {
            ensure!(k != k2, "{name} and {other} give equal keys");
        }
        cache.insert(k.clone(), choice(i as u32 + 2));
    }
    ensure!(
        cache.len() == variants.len() + 1,
        "len {} (every variant must be its own entry)",
        cache.len()
    );
    for (i, (name, k)) in variants.iter().enumerate() {
        ensure!(
            cache.get(k) == Some(choice(i as u32 + 2)),
            "{name}: wrong entry"
        );
    }
    ensure!(cache.get(&base) == Some(choice(1)), "base entry changed");
    Ok(())
}

fn lru_eviction_order() -> TestResult {
    let cache = AlgoCache::new(3);
    for i in 1..=3 {
        cache.insert(key(i), choice(i as u32));
    }
    // Recency, oldest first: 1 2 3. Touch 1: 2 3 1. Insert 4: evicts 2 -> 3 1 4.
    ensure!(cache.get(&key(1)).is_some(), "1 present");
    cache.insert(key(4), choice(4));
    ensure!(cache.len() == 3, "len {}", cache.len());
    let order: Vec<i64> = cache.entries().iter().map(|(k, _)| k.x_dims[0]).collect();
    ensure!(order == [3, 1, 4], "recency order {order:?}");
    ensure!(cache.get(&key(2)).is_none(), "2 must be evicted");
    // Re-inserting 3 refreshes it: 1 4 3; insert 5 evicts 1 -> 4 3 5.
    cache.insert(key(3), choice(33));
    cache.insert(key(5), choice(5));
    let order: Vec<i64> = cache.entries().iter().map(|(k, _)| k.x_dims[0]).collect();
    ensure!(order == [4, 3, 5], "recency order {order:?}");
    ensure!(cache.get(&key(3)) == Some(choice(33)), "3 replaced");
    ensure!(cache.get(&key(1)).is_none(), "1 must be evicted");
    ensure!(cache.stats().evictions == 2, "{:?}", cache.stats());
    // A miss does not refresh anything; remove frees a slot without eviction.
    ensure!(cache.remove(&key(4)) == Some(choice(4)), "remove 4");
    ensure!(cache.remove(&key(4)).is_none(), "remove twice");
    cache.insert(key(6), choice(6));
    let order: Vec<i64> = cache.entries().iter().map(|(k, _)| k.x_dims[0]).collect();
    ensure!(order == [5, 3, 6], "recency order {order:?}");
    ensure!(cache.stats().evictions == 2, "{:?}", cache.stats());
    Ok(())
}

fn stats() -> TestResult {
    let cache = AlgoCache::new(8);
    ensure!(cache.stats() == CacheStats::default(), "fresh stats");
    ensure!(cache.get(&key(1)).is_none(), "empty");
    cache.insert(key(1), choice(1));
    for _ in 0..3 {
        ensure!(cache.get(&key(1)) == Some(choice(1)), "hit");
    }
    ensure!(cache.get(&key(2)).is_none(), "miss");
    let _ = cache.remove(&key(1));
    let _ = cache.entries();
    let s = cache.stats();
    ensure!((s.hits, s.misses, s.evictions) == (3, 2, 0), "{s:?}");
    cache.clear();
    ensure!(cache.stats() == s, "clear keeps the stats");
    cache.reset_stats();
    ensure!(cache.stats() == CacheStats::default(), "reset");
    Ok(())
}

fn capacity_changes() -> TestResult {
    let cache = AlgoCache::new(10);
    ensure!(cache.capacity() == 10 && cache.is_empty(), "fresh");
    for i in 0..10 {
        cache.insert(key(i), choice(i as u32));
    }
    // Touch 0 and 1 so they survive the shrink.
    let _ = cache.get(&key(0));
    let _ = cache.get(&key(1));
    cache.set_capacity(4);
    ensure!(
        cache.capacity() == 4 && cache.len() == 4,
        "len {}",
        cache.len()
    );
    let kept: Vec<i64> = cache.entries().iter().map(|(k, _)| k.x_dims[0]).collect();
    ensure!(kept == [8, 9, 0, 1], "kept {kept:?}");
    ensure!(cache.stats().evictions == 6, "{:?}", cache.stats());
    // Growing keeps everything.
    cache.set_capacity(100);
    ensure!(cache.len() == 4, "len {}", cache.len());
    // Capacity 0 caches nothing, and empties the cache.
    cache.set_capacity(0);
    ensure!(cache.is_empty(), "len {}", cache.len());
    cache.insert(key(1), choice(1));
    ensure!(
        cache.is_empty() && cache.get(&key(1)).is_none(),
        "capacity 0 stored"
    );
    let zero = AlgoCache::new(0);
    zero.insert(key(1), choice(1));
    ensure!(zero.is_empty(), "new(0) stored");
    // Clear keeps the capacity.
    let c = AlgoCache::new(5);
    c.insert(key(1), choice(1));
    c.clear();
    ensure!(c.is_empty() && c.capacity() == 5, "clear");
    // The global cache.
    let g = AlgoCache::global();
    ensure!(
        std::ptr::eq(g, AlgoCache::global()),
        "global is one instance"
    );
    ensure!(
        g.capacity() == AlgoCache::DEFAULT_CAPACITY && AlgoCache::DEFAULT_CAPACITY == 4096,
        "default capacity"
    );
    ensure!(
        AlgoCache::default().capacity() == AlgoCache::DEFAULT_CAPACITY,
        "default"
    );
    ensure!(format!("{c:?}").contains("capacity: 5"), "{c:?}");
    Ok(())
}

fn concurrent() -> TestResult {
    const THREADS: usize = 8;
    const OPS: usize = 2000;
    let cache = Arc::new(AlgoCache::new(64));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || -> Result<(usize, usize), String> {
                let (mut gets, mut hits) = (0, 0);
                for i in 0..OPS {
                    // Half the keys are shared by all threads, half are this thread's own.
                    let n = if i % 2 == 0 {
                        (i % 50) as i64
                    } else {
                        1000 + (t * 100 + i % 100) as i64
                    };
                    let k = key(n);
                    // The value is a function of the key, so any hit can be checked.
                    let want = choice(n as u32);
                    if i % 3 == 0 {
                        cache.insert(k, want);
                    } else {
                        gets += 1;
                        if let Some(c) = cache.get(&k) {
                            hits += 1;
                            if c != want {
                                return Err(format!("key {n}: got {c:?}, want {want:?}"));
                            }
                        }
                    }
                    if i % 500 == 0 {
                        let _ = (cache.len(), cache.stats(), AlgoCache::global().len());
                    }
                }
                Ok((gets, hits))
            })
        })
        .collect();
    let (mut gets, mut hits) = (0, 0);
    for h in handles {
        let (g, hi) = h.join().map_err(|_| "a thread panicked".to_string())??;
        gets += g;
        hits += hi;
    }
    let s = cache.stats();
    ensure!(
        s.hits + s.misses == gets as u64 && s.hits == hits as u64,
        "{s:?}, {gets} gets, {hits} hits"
    );
    ensure!(cache.len() <= 64, "len {}", cache.len());
    let inserted = THREADS * OPS.div_ceil(3);
    ensure!(s.evictions > 0 && s.evictions as usize <= inserted, "{s:?}");
    for (k, c) in cache.entries() {
        ensure!(c == choice(k.x_dims[0] as u32), "entry {k:?} -> {c:?}");
    }
    Ok(())
}

/// Keys with every field away from its default, extreme values included.
fn varied_entries() -> Vec<(AlgoKey, AlgoChoice)> {
    let mut out: Vec<(AlgoKey, AlgoChoice)> = one_field_variants()
        .into_iter()
        .enumerate()
        .map(|(i, (_, k))| (k, choice(i as u32)))
        .collect();
    let mut odd = key(1);
    odd.device = -1;
    odd.x_type = u32::MAX;
    odd.x_dims = vec![i64::MIN, i64::MAX, 0];
    odd.x_strides = vec![];
    odd.pad = vec![];
    odd.groups = -7;
    odd.workspace_limit = Some(usize::MAX);
    odd.deterministic = true;
    odd.math = MathPolicy::ForbidTensorCores;
    odd.direction = ConvDirection::BackwardFilter;
    odd.search = CacheSearch::Fixed;
    out.push((
        odd,
        AlgoChoice {
            algo: u32::MAX,
            math_type: 3,
            workspace_bytes: usize::MAX,
        },
    ));
    out.push((key(8), choice(999)));
    out
}

fn save_load_round_trip() -> TestResult {
    let dir = temp_dir("round-trip")?;
    let path = dir.join("algos.txt");
    let cache = AlgoCache::new(100);
    let entries = varied_entries();
    for (k, c) in &entries {
        cache.insert(k.clone(), *c);
    }
    cache.save(&path).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = text.lines().collect();
    ensure!(
        lines.len() == entries.len() + 2,
        "{} lines for {} entries",
        lines.len(),
        entries.len()
    );
    ensure!(
        lines.first() == Some(&"cudnn-rs algorithm cache, format 1"),
        "header {:?}",
        lines.first()
    );
    ensure!(
        lines.last() == Some(&format!("end {}", entries.len()).as_str()),
        "end line {:?}",
        lines.last()
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n != "algos.txt")
        .collect();
    ensure!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let fresh = AlgoCache::new(100);
    let n = fresh.load(&path).map_err(|e| e.to_string())?;
    ensure!(n == entries.len(), "loaded {n}");
    ensure!(fresh.entries() == entries, "round trip differs");
    ensure!(fresh.entries() == cache.entries(), "round trip differs");
    ensure!(fresh.stats() == CacheStats::default(), "load counted stats");

    // Loading merges: existing entries stay, same keys take the file's value,
    // and loaded entries are the most recent.
    let merged = AlgoCache::new(100);
    merged.insert(key(12345), choice(7));
    merged.insert(key(8), choice(1));
    let n = merged.load(&path).map_err(|e| e.to_string())?;
    ensure!(n == entries.len(), "loaded {n}");
    ensure!(merged.len() == entries.len() + 1, "len {}", merged.len());
    let all = merged.entries();
    ensure!(
        all.first() == Some(&(key(12345), choice(7))),
        "untouched entry first: {:?}",
        all.first()
    );
    ensure!(merged.get(&key(8)) == Some(choice(999)), "file value wins");

    // Loading into a smaller cache keeps the most recent of the file.
    let small = AlgoCache::new(2);
    ensure!(
        small.load(&path).map_err(|e| e.to_string())? == entries.len(),
        "count"
    );
    ensure!(
        small.entries() == entries[entries.len() - 2..],
        "kept {:?}",
        small.entries()
    );

    // Saving again replaces the file; an empty cache saves an empty list.
    AlgoCache::new(4).save(&path).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    ensure!(
        text == "cudnn-rs algorithm cache, format 1\nend 0\n",
        "empty save: {text:?}"
    );
    ensure!(
        AlgoCache::new(4).load(&path).map_err(|e| e.to_string())? == 0,
        "empty load"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn check_file_error(e: &Error, path: &Path, needle: &str, line: Option<usize>) -> TestResult {
    let Error::InvalidArgument { arg, rule, value } = e else {
        return Err(format!("wrong kind: {e:?}").into());
    };
    ensure!(arg == "algorithm cache file", "arg {arg:?}");
    ensure!(*value == path.display().to_string(), "value {value:?}");
    ensure!(
        rule.contains(needle),
        "`{rule}` does not mention `{needle}`"
    );
    if let Some(line) = line {
        ensure!(
            rule.ends_with(&format!(" at line {line}")),
            "`{rule}` does not end with `at line {line}`"
        );
    }
    let text = e.to_string();
    ensure!(text.contains(&value[..]), "message lacks the path: {text}");
    Ok(())
}

/// An `Error::Io` whose path is `path` or inside it (a temporary file beside
/// the cache file names its folder), of `kind` if given.
fn check_io_error(e: &Error, path: &Path, kind: Option<std::io::ErrorKind>) -> TestResult {
    let Error::Io {
        path: p, kind: k, ..
    } = e
    else {
        return Err(format!("not an Io error: {e:?}").into());
    };
    ensure!(p.starts_with(path), "path {p:?}, want {path:?}");
    if let Some(kind) = kind {
        ensure!(*k == kind, "kind {k:?}, want {kind:?}");
    }
    ensure!(
        e.to_string().contains("algorithm cache file"),
        "message: {e}"
    );
    Ok(())
}

fn corrupt_files() -> TestResult {
    let dir = temp_dir("corrupt")?;
    let good_path = dir.join("good.txt");
    let source = AlgoCache::new(16);
    for i in 1..=3 {
        source.insert(key(i), choice(i as u32));
    }
    source.save(&good_path).map_err(|e| e.to_string())?;
    let good = std::fs::read_to_string(&good_path).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = good.lines().collect();
    ensure!(lines.len() == 5, "good file has {} lines", lines.len());
    let join = |ls: &[&str]| ls.join("\n") + "\n";
    let entry2 = lines[2];

    let mut cases: Vec<(&str, Vec<u8>, &str, Option<usize>)> = vec![
        ("empty", vec![], "empty file", Some(1)),
        (
            "garbage",
            b"hello world\nmore\n".to_vec(),
            "not an algorithm cache",
            Some(1),
        ),
        (
            "binary",
            vec![0xff, 0xfe, 0x00, 0x13, b'\n'],
            "not UTF-8",
            Some(1),
        ),
        (
            "binary later",
            [lines[0].as_bytes(), b"\n", &[0xc3, 0x28]].concat(),
            "not UTF-8",
            Some(2),
        ),
        (
            "wrong version",
            join(&["cudnn-rs algorithm cache, format 2", lines[1], "end 1"]).into_bytes(),
            "unsupported format version `2`",
            Some(1),
        ),
        (
            "header only, no end",
            join(&lines[..1]).into_bytes(),
            "truncated",
            Some(2),
        ),
        (
            "truncated mid-line",
            good.as_bytes()[..good.find(entry2).unwrap_or(0) + entry2.len() / 2].to_vec(),
            "malformed entry",
            Some(3),
        ),
        (
            "truncated inside the last number",
            {
                // Everything up to the middle of the last entry's final number,
                // which on its own still parses: only the missing `end` tells.
                let cut = good.find(lines[3]).unwrap_or(0) + lines[3].len() - 1;
                good.as_bytes()[..cut].to_vec()
            },
            "truncated file (no final `end` line)",
            Some(5),
        ),
        (
            "truncated at a line boundary",
            join(&lines[..4]).into_bytes(),
            "truncated",
            Some(5),
        ),
        (
            "garbage line",
            join(&[lines[0], lines[1], "garbage", lines[2], lines[3], "end 3"]).into_bytes(),
            "malformed entry",
            Some(3),
        ),
        (
            "blank line",
            join(&[lines[0], lines[1], "", lines[2], lines[3], "end 3"]).into_bytes(),
            "malformed entry",
            Some(3),
        ),
        (
            "bad number",
            join(&[
                lines[0],
                lines[1],
                &entry2.replace("groups=1", "groups=x1"),
                lines[3],
                lines[4],
            ])
            .into_bytes(),
            "bad number `x1` for `groups`",
            Some(3),
        ),
        (
            "bad list number",
            join(&[
                lines[0],
                lines[1],
                &entry2.replace("pad=1,1", "pad=1,,1"),
                lines[3],
                lines[4],
            ])
            .into_bytes(),
            "bad number `` for `pad`",
            Some(3),
        ),
        (
            "overflowing number",
            join(&[
                lines[0],
                &lines[1].replace("x_type=0", "x_type=4294967296"),
                lines[2],
                lines[3],
                lines[4],
            ])
            .into_bytes(),
            "bad number `4294967296` for `x_type`",
            Some(2),
        ),
        (
            "renamed field",
            join(&[
                lines[0],
                lines[1],
                lines[2],
                &lines[3].replace("mode=", "mood="),
                lines[4],
            ])
            .into_bytes(),
            "expected field `mode=...`",
            Some(4),
        ),
        (
            "unknown direction",
            join(&[
                lines[0],
                &lines[1].replace("direction=forward", "direction=sideways"),
                lines[2],
                lines[3],
                lines[4],
            ])
            .into_bytes(),
            "unknown value `sideways` for `direction`",
            Some(2),
        ),
        (
            "search out of range",
            join(&[
                lines[0],
                lines[1],
                &entry2.replace("search=0", "search=3"),
                lines[3],
                lines[4],
            ])
            .into_bytes(),
            "`search` must be 0, 1 or 2",
            Some(3),
        ),
        (
            "duplicate entry",
            join(&[lines[0], lines[1], lines[2], lines[1], "end 3"]).into_bytes(),
            "duplicate entry (same key as line 2)",
            Some(4),
        ),
        (
            "end count wrong",
            join(&[lines[0], lines[1], lines[2], lines[3], "end 4"]).into_bytes(),
            "says 4 entries but the file has 3",
            Some(5),
        ),
        (
            "content after end",
            join(&[lines[0], lines[1], lines[2], lines[3], lines[4], lines[1]]).into_bytes(),
            "after the `end` line",
            Some(6),
        ),
    ];
    // An extra field.
    let extra = format!("{} extra=1", lines[1]);
    cases.push((
        "extra field",
        join(&[lines[0], &extra, lines[2], lines[3], lines[4]]).into_bytes(),
        "malformed entry (25 fields, expected 24)",
        Some(2),
    ));

    for (name, bytes, needle, line) in cases {
        let path = dir.join(format!("{}.txt", name.replace(' ', "-")));
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        // A cache with its own contents and stats, which a failed load must not touch.
        let cache = AlgoCache::new(16);
        cache.insert(key(77), choice(77));
        let _ = cache.get(&key(77));
        let (before, stats) = (cache.entries(), cache.stats());
        match cache.load(&path) {
            Ok(n) => return Err(format!("{name}: accepted ({n} entries)").into()),
            Err(e) => check_file_error(&e, &path, needle, line)
                .map_err(|m| format!("{name}: {}", m.message().unwrap_or_default()))?,
        }
        ensure!(
            cache.entries() == before && cache.stats() == stats,
            "{name}: a failed load changed the cache"
        );
    }

    // The unmodified file loads.
    ensure!(
        AlgoCache::new(16)
            .load(&good_path)
            .map_err(|e| e.to_string())?
            == 3,
        "good file"
    );
    // A missing file is an error naming it (no line).
    let missing = dir.join("missing.txt");
    let e = match AlgoCache::new(4).load(&missing) {
        Ok(n) => return Err(format!("missing file loaded {n}").into()),
        Err(e) => e,
    };
    // Error::Io naming the path, as PlanCache reports it (issue 31 item 9 F).
    check_io_error(&e, &missing, Some(std::io::ErrorKind::NotFound))?;
    // A FIFO at the path: refused at once as not a regular file (an open
    // that waited for a writer would block forever).
    #[cfg(unix)]
    {
        let fifo = dir.join("fifo.txt");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())
            .map_err(|e| e.to_string())?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        ensure!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0, "mkfifo");
        match AlgoCache::new(4).load(&fifo) {
            Ok(n) => return Err(format!("a FIFO loaded {n}").into()),
            Err(e) => check_file_error(&e, &fifo, "regular file", None)?,
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn save_errors() -> TestResult {
    let dir = temp_dir("save-errors")?;
    let cache = AlgoCache::new(4);
    cache.insert(key(1), choice(1));
    let nowhere = dir.join("no-such-dir").join("algos.txt");
    match cache.save(&nowhere) {
        Ok(()) => return Err("saved into a missing directory".into()),
        Err(e) => check_io_error(&e, &nowhere.with_file_name(""), None)?,
    }
    let root = Path::new("/");
    match cache.save(root) {
        Ok(()) => return Err("saved to /".into()),
        Err(e) => check_file_error(&e, root, "must name a file", None)?,
    }
    // A directory in the way of the rename.
    let blocked = dir.join("blocked");
    std::fs::create_dir_all(blocked.join("inner")).map_err(|e| e.to_string())?;
    match cache.save(&blocked) {
        Ok(()) => return Err("renamed over a directory".into()),
        Err(e) => check_io_error(&e, &blocked, None)?,
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n != "blocked")
        .collect();
    ensure!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Every search kind saves and loads (the field holds only values the file
/// format has), as the codes 0, 1 and 2; the plan options map onto them.
fn search_kinds_round_trip() -> TestResult {
    use cudnn::dnn::{AlgoSearch, ConvAlgo};
    let dir = temp_dir("search-kinds")?;
    let path = dir.join("algos.txt");
    let kinds = [
        (CacheSearch::Heuristic, 0),
        (CacheSearch::Exhaustive, 1),
        (CacheSearch::Fixed, 2),
    ];
    let cache = AlgoCache::new(8);
    for (i, &(kind, code)) in kinds.iter().enumerate() {
        ensure!(kind.code() == code, "{kind:?} code {}", kind.code());
        ensure!(
            CacheSearch::from_code(code) == Some(kind),
            "from_code({code})"
        );
        let mut k = key(i as i64 + 1);
        k.search = kind;
        cache.insert(k, choice(i as u32));
    }
    ensure!(CacheSearch::from_code(3).is_none(), "from_code(3)");
    ensure!(
        CacheSearch::from(AlgoSearch::Heuristic) == CacheSearch::Heuristic
            && CacheSearch::from(AlgoSearch::Exhaustive) == CacheSearch::Exhaustive
            && CacheSearch::from(AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM))
                == CacheSearch::Fixed,
        "AlgoSearch mapping"
    );
    cache.save(&path).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    for code in 0..3 {
        ensure!(
            text.contains(&format!(" search={code} ")),
            "the file lacks search={code}:\n{text}"
        );
    }
    let loaded = AlgoCache::new(8);
    ensure!(
        loaded.load(&path).map_err(|e| e.to_string())? == 3,
        "loaded count"
    );
    ensure!(loaded.entries() == cache.entries(), "round trip differs");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A file over `MAX_FILE_BYTES` is refused without reading it all (a
/// sparse file of the limit plus one byte, and `/dev/zero`, which never
/// ends), and the cache is unchanged.
fn oversized_files_refused() -> TestResult {
    let dir = temp_dir("oversized")?;
    let big = dir.join("big.txt");
    let f = std::fs::File::create(&big).map_err(|e| e.to_string())?;
    f.set_len(AlgoCache::MAX_FILE_BYTES + 1)
        .map_err(|e| e.to_string())?;
    drop(f);
    let cache = AlgoCache::new(4);
    cache.insert(key(5), choice(5));
    let before = cache.entries();
    let mut paths = vec![big];
    let zero = Path::new("/dev/zero");
    if zero.exists() {
        paths.push(zero.to_path_buf());
    }
    for path in &paths {
        let start = std::time::Instant::now();
        match cache.load(path) {
            Ok(n) => return Err(format!("{}: loaded {n}", path.display()).into()),
            // A device is refused before it is read (not a regular file).
            Err(e) if path == zero => check_file_error(&e, path, "regular file", None)?,
            Err(e) => check_file_error(&e, path, "MAX_FILE_BYTES", None)?,
        }
        let took = start.elapsed();
        ensure!(
            took < std::time::Duration::from_secs(10),
            "{}: took {took:?}",
            path.display()
        );
        ensure!(
            cache.entries() == before,
            "a refused load changed the cache"
        );
    }
    // Exactly the limit is read (and then refused as not a cache).
    let at_limit = dir.join("at-limit.txt");
    let f = std::fs::File::create(&at_limit).map_err(|e| e.to_string())?;
    f.set_len(AlgoCache::MAX_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    drop(f);
    match cache.load(&at_limit) {
        Ok(n) => return Err(format!("zeros loaded {n}").into()),
        Err(e) => check_file_error(&e, &at_limit, "not an algorithm cache", Some(1))?,
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

pub fn main() {
    run(vec![
        unit("algo_cache::every_key_field_matters", every_field_matters),
        unit("algo_cache::lru_eviction_order", lru_eviction_order),
        unit("algo_cache::stats", stats),
        unit("algo_cache::capacity_changes", capacity_changes),
        unit("algo_cache::concurrent_8_threads", concurrent),
        unit("algo_cache::save_load_round_trip", save_load_round_trip),
        unit("algo_cache::corrupt_files_rejected_whole", corrupt_files),
        unit("algo_cache::save_errors", save_errors),
        unit(
            "algo_cache::search_kinds_round_trip",
            search_kinds_round_trip,
        ),
        unit(
            "algo_cache::oversized_files_refused",
            oversized_files_refused,
        ),
    ])
}
