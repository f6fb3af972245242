//! The soundness model (the crate's `SOUNDNESS.md`): the rules every public
//! API keeps, where each is enforced and the test that proves it, and the
//! contract of every public `unsafe fn` in one place.
#![doc = include_str!("../SOUNDNESS.md")]

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// `Type::name` of every `pub unsafe fn` under `dir` (the type of the
    /// `impl` block it is in), with its file and line.
    fn public_unsafe_fns(dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            if p.is_dir() {
                public_unsafe_fns(&p, out);
                continue;
            }
            if p.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let mut ty = String::from("?");
            for (i, line) in text.lines().enumerate() {
                // An item ends at a closing brace in the first column: the
                // end of an `impl` block, after which a function is free.
                if line.starts_with('}') {
                    ty = String::from("?");
                }
                let t = line.trim_start();
                if let Some(rest) = t.strip_prefix("impl")
                    && rest.starts_with(['<', ' '])
                {
                    ty = impl_type(rest);
                }
                if let Some(rest) = t.strip_prefix("pub unsafe fn ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    // A free function (no `impl` above it) by its name.
                    out.push((
                        if ty == "?" {
                            name
                        } else {
                            format!("{ty}::{name}")
                        },
                        format!("{}:{}", p.display(), i + 1),
                    ));
                }
            }
        }
    }

    /// The self type of an `impl` line: the last path segment after `for`
    /// (or after the generics), without its generics.
    fn impl_type(rest: &str) -> String {
        let mut s = rest.trim_start();
        if s.starts_with('<') {
            let mut depth = 0usize;
            let mut end = 0;
            for (i, c) in s.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            s = s[end..].trim_start();
        }
        if let Some(pos) = s.find(" for ") {
            s = s[pos + 5..].trim_start();
        }
        let path: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        path.rsplit("::").next().unwrap_or("?").to_string()
    }

    #[test]
    fn impl_type_reads_the_self_type() {
        assert_eq!(
            impl_type("<T: DataType> DeviceSlice<'_, T> {"),
            "DeviceSlice"
        );
        assert_eq!(impl_type(" Plan {"), "Plan");
        assert_eq!(
            impl_type("<K: Kind> Drop for Descriptor<K> {"),
            "Descriptor"
        );
        assert_eq!(impl_type(" fmt::Debug for super::Stream {"), "Stream");
    }

    #[test]
    fn every_public_unsafe_fn_is_listed() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = include_str!("../SOUNDNESS.md");
        let mut fns = Vec::new();
        public_unsafe_fns(&root.join("src"), &mut fns);
        assert!(
            fns.len() > 20,
            "the scan found only {} public unsafe fns: is it reading the sources?",
            fns.len()
        );
        let missing: Vec<String> = fns
            .iter()
            .filter(|(name, _)| !doc.contains(&format!("`{name}`")))
            .map(|(name, at)| format!("{name} ({at})"))
            .collect();
        assert!(
            missing.is_empty(),
            "public unsafe fns without their contract in SOUNDNESS.md (section 11): {missing:#?}"
        );
    }
}
