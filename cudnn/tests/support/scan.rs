//! Scans of the crate's own sources: which file calls what (the host
//! tier's guards that a new call site is covered by its test).

use std::path::Path;

/// The crate's sources, as (path under `src/`, text).
pub fn sources() -> Result<Vec<(String, String)>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in rd {
            let p = entry.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(&root)
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = std::fs::read_to_string(&p).map_err(|e| format!("{rel}: {e}"))?;
                out.push((rel, text));
            }
        }
    }
    Ok(out)
}

/// How often `call` is *called* (followed by `(`, or `,` for an attribute
/// constant) in `text`, outside comments and outside `#[cfg(test)]`
/// modules and test files.
pub fn count_calls(text: &str, call: &str) -> usize {
    let mut n = 0;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut from = 0;
        while let Some(at) = code[from..].find(call) {
            let start = from + at;
            let end = start + call.len();
            let before_ok = code[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let rest = code[end..].trim_start();
            let after_ok =
                rest.starts_with('(') || (call.ends_with("_ID") && rest.starts_with(','));
            if before_ok && after_ok {
                n += 1;
            }
            from = end;
        }
    }
    n
}
