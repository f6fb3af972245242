//! `cargo xtask import-cycles`: fail when files of `cudnn/src` import each
//! other in a circle.
//!
//! An edge runs from a file to the file that *defines* an item the first
//! one names: through a `use` (at module level or in a function body,
//! followed through re-exports to the definition) or through a path
//! written in the code (`super::x::f(..)`, `crate::graph::Tensor`, and the
//! `a::b` runs inside macro calls such as `format!`, whose tokens `syn`
//! does not parse, and inside `macro_rules!` bodies). Naming a module alone is not an edge, and neither is a
//! re-export (`pub use a::B;` in a `mod.rs` makes the name visible there;
//! it does not make that file depend on `a.rs`). `#[cfg(test)]` code is
//! left out: tests may reach anywhere.
//!
//! Every edge counts, between a parent file and its children too. A
//! circle that stays inside one module split into files (a `mod.rs` or
//! `x.rs` and the files of its own child modules, which use each other's
//! items by design) is shown and tolerated; one that reaches a single file
//! outside that module fails, and the crate root is never such a module
//! (it encloses everything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

use crate::srcmodel::{Crate, Target, is_test, use_leaves};

/// The circles known when the check was written, one per line (its files,
/// space-separated, sorted): each is a to-do, and the check fails on any
/// circle not listed here (a new one, or a known one that grew) and on a
/// listed one that is gone (delete its line).
const KNOWN: &str = "import-cycles-known.txt";

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("import-cycles takes no arguments (got `{a}`)"));
    }
    let root = crate::workspace_root().join("cudnn/src");
    let Circles {
        circles: cycles,
        split,
    } = find(&root)?;
    for c in &split {
        println!(
            "import-cycles: one module split into files (tolerated): {}",
            c.files.join(" <-> ")
        );
    }
    let known_path = crate::workspace_root().join("xtask").join(KNOWN);
    let known_text = std::fs::read_to_string(&known_path).unwrap_or_default();
    let known: BTreeSet<&str> = known_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut new = 0;
    let mut seen = BTreeSet::new();
    for c in &cycles {
        let line = c.files.join(" ");
        if known.contains(line.as_str()) {
            seen.insert(line);
            println!(
                "import-cycles: known circle (xtask/{KNOWN}): {}",
                c.files.join(" <-> ")
            );
            continue;
        }
        new += 1;
        eprintln!("new circle of {} files:", c.files.len());
        for (from, to, why) in &c.edges {
            eprintln!("  {from} -> {to}   ({why})");
        }
    }
    let gone: Vec<&&str> = known.iter().filter(|k| !seen.contains(**k)).collect();
    for g in &gone {
        eprintln!(
            "import-cycles: the known circle `{g}` is gone: delete its line from xtask/{KNOWN}"
        );
    }
    if new > 0 || !gone.is_empty() {
        return Err(format!(
            "{new} new import circle(s) between the files of cudnn/src (move what both sides \
             need into a file of its own), {} stale line(s) in xtask/{KNOWN}",
            gone.len()
        ));
    }
    println!(
        "import-cycles: no new circle between the files of cudnn/src ({} known, listed in xtask/{KNOWN})",
        cycles.len()
    );
    Ok(())
}

/// One strongly connected set of files, with the edges inside it.
#[derive(Debug)]
pub struct Cycle {
    pub files: Vec<String>,
    pub edges: Vec<(String, String, String)>,
}

/// Every file-level import circle of the crate rooted at `src/lib.rs`.
pub fn find(src: &Path) -> Result<Circles, String> {
    let krate = Crate::load(&src.join("lib.rs"))?;
    let rel = |p: &Path| -> String {
        p.strip_prefix(src)
            .unwrap_or(p)
            .to_string_lossy()
            .replace('\\', "/")
    };
    // (from, to) -> the first name that made the edge.
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for (mi, m) in krate.modules.iter().enumerate() {
        let from = rel(&m.file);
        let mut paths: Vec<Vec<String>> = Vec::new();
        for item in &m.items {
            match item {
                syn::Item::Use(u) if !is_test(&u.attrs) => {
                    // A `pub use` is a re-export, not a use.
                    if matches!(u.vis, syn::Visibility::Inherited) {
                        paths.extend(
                            use_leaves(u)
                                .into_iter()
                                .filter(|l| l.name.is_some())
                                .map(|l| l.path),
                        );
                    }
                }
                syn::Item::Use(_) | syn::Item::Mod(_) => {}
                other => {
                    let mut v = Paths::default();
                    v.visit_item(other);
                    paths.extend(v.paths);
                }
            }
        }
        for p in paths {
            if let Some(t @ Target::Item(..)) = krate.resolve(mi, &p) {
                let to = rel(krate.file_of(t));
                if to != from {
                    edges
                        .entry((from.clone(), to))
                        .or_insert_with(|| p.join("::"));
                }
            }
        }
    }
    // The module each file is (the first module read from it: inline
    // modules come after their file's own).
    let mut file_module: BTreeMap<String, usize> = BTreeMap::new();
    for (mi, m) in krate.modules.iter().enumerate() {
        file_module.entry(rel(&m.file)).or_insert(mi);
    }
    // A module split into files (a parent and its own child files, which
    // use each other's items by design: `super::Ctx` in the children,
    // `child::f(..)` in the parent) is one unit: a circle that stays inside
    // one such module is tolerated. The crate root is no such unit (it
    // encloses everything), and a circle that reaches one file outside the
    // module is reported whole.
    let split_module = |c: &Cycle| {
        let ms: Vec<usize> = c
            .files
            .iter()
            .filter_map(|f| file_module.get(f).copied())
            .collect();
        ms.len() == c.files.len()
            && ms
                .iter()
                .any(|&top| top != 0 && ms.iter().all(|&m| krate.encloses(top, m)))
    };
    let (split, circles): (Vec<Cycle>, Vec<Cycle>) = strongly_connected(&edges)
        .into_iter()
        .partition(split_module);
    Ok(Circles { circles, split })
}

/// What [`find`] finds.
#[derive(Debug)]
pub struct Circles {
    /// Circles between modules: each fails the check unless known.
    pub circles: Vec<Cycle>,
    /// Circles inside one module split into files (tolerated, shown).
    pub split: Vec<Cycle>,
}

/// Every path in the code (types, expressions, patterns), tests left out.
#[derive(Default)]
struct Paths {
    paths: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            self.paths
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(f) => &f.attrs,
            syn::Item::Const(f) => &f.attrs,
            syn::Item::Static(f) => &f.attrs,
            syn::Item::Struct(f) => &f.attrs,
            syn::Item::Mod(_) => return,
            _ => {
                syn::visit::visit_item(self, i);
                return;
            }
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, i);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function body (or any block): its leaves are
        // paths written in this module, like a module-level `use`.
        if !is_test(&u.attrs) {
            self.paths.extend(
                use_leaves(u)
                    .into_iter()
                    .filter(|l| l.name.is_some())
                    .map(|l| l.path),
            );
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // `syn` leaves a macro's input as tokens: the paths in it
        // (`format!("{}", super::address::VAR)`) are found by scanning.
        self.paths.extend(macro_paths(m.tokens.clone()));
        syn::visit::visit_macro(self, m);
    }
}

/// The paths written in a macro's tokens: every run `a::b::c` of two or
/// more identifiers (`$crate::x` included), in nested groups too. A run
/// after a leading `::` is external and left out.
fn macro_paths(tokens: proc_macro2::TokenStream) -> Vec<Vec<String>> {
    use proc_macro2::TokenTree;
    let mut out = Vec::new();
    let mut run: Vec<String> = Vec::new();
    // `:` seen since the last token that was not one (2: a `::`).
    let mut colons = 0usize;
    // The run started after a `::` (`::std::fmt`).
    let mut external = false;
    let flush = |run: &mut Vec<String>, external: bool, out: &mut Vec<Vec<String>>| {
        if run.len() >= 2 && !external {
            out.push(std::mem::take(run));
        }
        run.clear();
    };
    for tt in tokens {
        match tt {
            TokenTree::Ident(id) => {
                if run.is_empty() || colons != 2 {
                    flush(&mut run, external, &mut out);
                    external = colons == 2;
                }
                run.push(id.to_string());
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' => colons += 1,
            other => {
                flush(&mut run, external, &mut out);
                colons = 0;
                if let TokenTree::Group(g) = other {
                    out.extend(macro_paths(g.stream()));
                }
            }
        }
    }
    flush(&mut run, external, &mut out);
    out
}

/// Tarjan's algorithm over the file graph: the sets of more than one file.
fn strongly_connected(edges: &BTreeMap<(String, String), String>) -> Vec<Cycle> {
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of = |n: &String| nodes.iter().position(|x| *x == n).unwrap_or(0);
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[index_of(a)].push(index_of(b));
    }
    struct St {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn strong(v: usize, adj: &[Vec<usize>], s: &mut St) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    strong(w, adj, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = nodes.len();
    let mut s = St {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            strong(v, &adj, &mut s);
        }
    }
    let mut cycles: Vec<Cycle> = s
        .out
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let set: BTreeSet<&String> = c.iter().map(|&i| nodes[i]).collect();
            let edges = edges
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|((a, b), why)| (a.clone(), b.clone(), why.clone()))
                .collect();
            Cycle {
                files: set.into_iter().cloned().collect(),
                edges,
            }
        })
        .collect();
    cycles.sort_by(|a, b| a.files.cmp(&b.files));
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xtask-cycles-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_use_circle_through_a_reexport_is_found() {
        let d = tmp("use");
        write(
            &d,
            &[
                ("lib.rs", "mod a; mod b; pub use a::A;"),
                ("a.rs", "use crate::b::B; pub struct A(B);"),
                // `crate::A` is the re-export in lib.rs: the edge goes to a.rs.
                ("b.rs", "use crate::A; pub struct B; fn f(_: A) {}"),
            ],
        );
        let c = find(&d).unwrap().circles;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].files, vec!["a.rs".to_string(), "b.rs".to_string()]);
    }

    #[test]
    fn a_path_in_code_is_an_edge_and_tests_are_not() {
        let d = tmp("path");
        write(
            &d,
            &[
                ("lib.rs", "mod x;"),
                ("x/mod.rs", "mod a; mod b;"),
                ("x/a.rs", "pub(crate) fn top() { super::b::low() }"),
                ("x/b.rs", "pub(crate) fn low() { super::a::top() }"),
            ],
        );
        assert_eq!(find(&d).unwrap().circles.len(), 1);
        write(
            &d,
            &[(
                "x/b.rs",
                "pub(crate) fn low() {} #[cfg(test)] mod tests { fn t() { super::super::a::top() } }",
            )],
        );
        assert!(find(&d).unwrap().circles.is_empty());
    }

    #[test]
    fn a_parent_and_its_child_modules_are_a_tolerated_split() {
        let d = tmp("parent");
        write(
            &d,
            &[
                ("lib.rs", "mod x;"),
                ("x/mod.rs", "mod y; pub(crate) fn top() { y::low() }"),
                ("x/y.rs", "pub(crate) fn low() { super::top() }"),
            ],
        );
        let c = find(&d).unwrap();
        assert!(c.circles.is_empty(), "{c:?}");
        assert_eq!(c.split.len(), 1, "{c:?}");
        assert_eq!(
            c.split[0].files,
            vec!["x/mod.rs".to_string(), "x/y.rs".to_string()]
        );
        // A child using its parent's items, the parent not using the
        // child's: no circle at all.
        write(&d, &[("x/mod.rs", "mod y; pub(crate) fn top() {}")]);
        let c = find(&d).unwrap();
        assert!(c.circles.is_empty() && c.split.is_empty(), "{c:?}");
    }

    #[test]
    fn a_circle_through_a_parent_file_and_a_third_file_is_found() {
        // x/mod.rs -> z.rs -> x/y.rs -> x/mod.rs: the last edge is a child
        // using its parent's item, but z.rs is outside x.
        let d = tmp("parent3");
        write(
            &d,
            &[
                ("lib.rs", "mod x; mod z;"),
                (
                    "x/mod.rs",
                    "pub(crate) mod y; pub(crate) fn top() { crate::z::mid() }",
                ),
                ("x/y.rs", "pub(crate) fn low() { super::top() }"),
                ("z.rs", "pub(crate) fn mid() { crate::x::y::low() }"),
            ],
        );
        let c = find(&d).unwrap();
        assert_eq!(c.circles.len(), 1, "{c:?}");
        assert_eq!(c.circles[0].files, vec!["x/mod.rs", "x/y.rs", "z.rs"]);
    }

    #[test]
    fn a_circle_through_the_crate_root_is_found() {
        let d = tmp("root");
        write(
            &d,
            &[
                (
                    "lib.rs",
                    "mod a; mod b; pub(crate) const LIMIT: usize = 1; fn g() { a::f() }",
                ),
                ("a.rs", "pub(crate) fn f() { crate::b::h(); }"),
                ("b.rs", "pub(crate) fn h() -> usize { crate::LIMIT }"),
            ],
        );
        let c = find(&d).unwrap();
        assert_eq!(c.circles.len(), 1, "{c:?}");
        assert_eq!(c.circles[0].files, vec!["a.rs", "b.rs", "lib.rs"]);
        assert!(c.split.is_empty(), "{c:?}");
    }

    #[test]
    fn a_use_in_a_function_body_is_an_edge() {
        let d = tmp("fnuse");
        write(
            &d,
            &[
                ("lib.rs", "mod a; mod b;"),
                (
                    "a.rs",
                    "pub struct A; pub(crate) fn f() { use crate::b::B; let _ = B; }",
                ),
                (
                    "b.rs",
                    "pub struct B; fn g() { { use super::a::A as Renamed; let _ = Renamed; } }",
                ),
            ],
        );
        let c = find(&d).unwrap().circles;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].files, vec!["a.rs", "b.rs"]);
        // The same uses under #[cfg(test)] are no edge.
        write(
            &d,
            &[(
                "b.rs",
                "pub struct B; fn g() { #[cfg(test)] use super::a::A; }",
            )],
        );
        assert!(find(&d).unwrap().circles.is_empty());
    }

    #[test]
    fn a_path_in_a_macro_call_is_an_edge() {
        let d = tmp("macro");
        write(
            &d,
            &[
                ("lib.rs", "mod a; mod b;"),
                (
                    "a.rs",
                    "pub const VAR: &str = \"V\"; fn f() -> String { format!(\"{}\", crate::b::B) }",
                ),
                (
                    "b.rs",
                    "pub struct B; fn g() { println!(\"{}\", [super::a::VAR][0]); }",
                ),
            ],
        );
        let c = find(&d).unwrap().circles;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].files, vec!["a.rs", "b.rs"]);
        // `::b::B` (a leading `::`: another crate) and `x.b` are no paths
        // of this crate; only the half in b.rs remains.
        write(
            &d,
            &[(
                "a.rs",
                "pub const VAR: &str = \"V\"; fn f(x: S) -> String { format!(\"{}{}\", ::b::B, x.b) }",
            )],
        );
        assert!(find(&d).unwrap().circles.is_empty());
    }

    #[test]
    fn macro_paths_reads_runs_of_two_or_more() {
        let ts: proc_macro2::TokenStream =
            "\"{}\", crate::a::B, x: super::c, ::std::fmt, $crate::d::E, y, (self::f::G)"
                .parse()
                .unwrap();
        let got: Vec<String> = macro_paths(ts).iter().map(|p| p.join("::")).collect();
        assert_eq!(
            got,
            vec!["crate::a::B", "super::c", "crate::d::E", "self::f::G"]
        );
    }

    #[test]
    fn a_glob_reexport_is_followed() {
        let d = tmp("glob");
        write(
            &d,
            &[
                ("lib.rs", "mod m; mod n;"),
                ("m/mod.rs", "mod inner; pub use inner::*;"),
                ("m/inner.rs", "pub struct I; fn g(_: crate::n::N) {}"),
                ("n.rs", "pub struct N(crate::m::I);"),
            ],
        );
        let c = find(&d).unwrap().circles;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            c[0].files,
            vec!["m/inner.rs".to_string(), "n.rs".to_string()]
        );
    }
}
