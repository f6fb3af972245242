//! The module tree of a crate read from its sources with `syn`, and name
//! resolution good enough for the two source checks (`public-api`,
//! `import-cycles`).
//!
//! What it understands: `mod name;` (with `name.rs`, `name/mod.rs` and
//! `#[path]`), inline modules, `use` trees (renames, groups, globs), items
//! defined in a module, and paths that start with `crate`, `super`, `self`
//! or a name in scope. What it does not: macros that expand to items (their
//! items are invisible), `#[cfg]` other than `test` (such items are kept and
//! annotated), and names that resolve only through the prelude or an
//! extern crate (they are external).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One module: the crate root, a file module or an inline module.
pub struct Module {
    /// The file the module's items are written in.
    pub file: PathBuf,
    /// The module's own items (child modules' items are in their `Module`).
    pub items: Vec<syn::Item>,
    /// The parent module's index (the root is its own parent).
    pub parent: usize,
    /// `(name, index)` of its child modules.
    pub children: Vec<(String, usize)>,
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A module (index into [`Crate::modules`]).
    Module(usize),
    /// An item defined in a module: its index and the item's index there.
    Item(usize, usize),
}

/// A crate's module tree.
pub struct Crate {
    pub modules: Vec<Module>,
}

/// `true` when the attributes hold `#[cfg(test)]`.
pub fn is_test(attrs: &[syn::Attribute]) -> bool {
    cfgs(attrs).iter().any(|c| c == "test")
}

/// The `#[cfg(...)]` predicates, as written (spaces removed).
pub fn cfgs(attrs: &[syn::Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .filter_map(|a| a.meta.require_list().ok())
        .map(|l| l.tokens.to_string().replace(' ', ""))
        .collect()
}

/// The name an item defines, when it defines one in the type or value
/// namespace (`use`, `impl` and foreign blocks define none).
pub fn item_name(item: &syn::Item) -> Option<String> {
    let id = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) => match &i.ident {
            Some(id) => id,
            None => return macro_made_name(i),
        },
        _ => return None,
    };
    Some(id.to_string())
}

/// The type-like name a macro call at item level most likely defines: the
/// first identifier of its input after any attributes (doc comments), when
/// it starts with an upper-case letter (`plan_common!(/// docs
/// ConvForwardPlan, ConvFwd)` defines `ConvForwardPlan`). A guess that
/// lets paths, `use`s and `impl` blocks that name such a type resolve;
/// what the macro makes besides it is not seen.
pub fn macro_made_name(m: &syn::ItemMacro) -> Option<String> {
    if m.ident.is_some() || m.mac.path.is_ident("thread_local") {
        return None;
    }
    let mut skip_group = false;
    for tt in m.mac.tokens.clone() {
        match tt {
            proc_macro2::TokenTree::Punct(p) if p.as_char() == '#' => skip_group = true,
            proc_macro2::TokenTree::Group(_) if skip_group => skip_group = false,
            proc_macro2::TokenTree::Ident(id) => {
                let s = id.to_string();
                return s.starts_with(|c: char| c.is_ascii_uppercase()).then_some(s);
            }
            _ => return None,
        }
    }
    None
}

/// One leaf of a `use` tree: the name it brings in (`None` for a glob)
/// and the path it names.
#[derive(Clone, Debug)]
pub struct UseLeaf {
    pub name: Option<String>,
    pub path: Vec<String>,
}

/// Flattens a `use` item into its leaves.
pub fn use_leaves(u: &syn::ItemUse) -> Vec<UseLeaf> {
    fn walk(
        t: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Option<String>, Vec<String>)>,
    ) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut path = prefix.clone();
                if name != "self" {
                    path.push(name.clone());
                }
                let name = if name == "self" {
                    prefix.last().cloned().unwrap_or(name)
                } else {
                    name
                };
                out.push((Some(name), path));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                out.push((Some(r.rename.to_string()), path));
            }
            syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    walk(t, prefix, out);
                }
            }
        }
    }
    let mut raw = Vec::new();
    let mut prefix = Vec::new();
    if u.leading_colon.is_some() {
        prefix.push(String::from("::"));
    }
    walk(&u.tree, &mut prefix, &mut raw);
    raw.into_iter()
        .map(|(name, path)| UseLeaf { name, path })
        .collect()
}

impl Crate {
    /// Reads the crate whose root file is `root` (`src/lib.rs`), leaving
    /// out `#[cfg(test)]` modules.
    pub fn load(root: &Path) -> Result<Crate, String> {
        let mut c = Crate {
            modules: Vec::new(),
        };
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        let items = parse_file(root)?;
        c.add(root.to_path_buf(), dir, items, 0)?;
        Ok(c)
    }

    /// Adds a module (its items, then its child modules, depth first) and
    /// returns its index.
    fn add(
        &mut self,
        file: PathBuf,
        child_dir: PathBuf,
        items: Vec<syn::Item>,
        parent: usize,
    ) -> Result<usize, String> {
        let me = self.modules.len();
        self.modules.push(Module {
            file: file.clone(),
            items: Vec::new(),
            parent,
            children: Vec::new(),
        });
        let mut kept = Vec::new();
        for item in items {
            let syn::Item::Mod(m) = &item else {
                kept.push(item);
                continue;
            };
            if is_test(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let idx = if let Some((_, content)) = &m.content {
                self.add(file.clone(), child_dir.join(&name), content.clone(), me)?
            } else {
                let (f, d) = module_file(&file, &child_dir, &name, &m.attrs)?;
                let items = parse_file(&f)?;
                self.add(f, d, items, me)?
            };
            self.modules[me].children.push((name, idx));
            kept.push(item);
        }
        self.modules[me].items = kept;
        Ok(me)
    }

    /// What `name` means in module `m`: a child module, an item defined
    /// there, or a name a `use` brings in (followed to its end).
    fn lookup_in(&self, m: usize, name: &str, seen: &mut Seen) -> Option<Target> {
        if !seen.insert((m, name.to_string())) {
            return None;
        }
        let module = &self.modules[m];
        if let Some((_, c)) = module.children.iter().find(|(n, _)| n == name) {
            return Some(Target::Module(*c));
        }
        let is_call = |it: &syn::Item| matches!(it, syn::Item::Macro(mm) if mm.ident.is_none());
        if let Some(i) = module
            .items
            .iter()
            .position(|it| !is_call(it) && item_name(it).as_deref() == Some(name))
        {
            return Some(Target::Item(m, i));
        }
        let leaves: Vec<UseLeaf> = module
            .items
            .iter()
            .filter_map(|it| match it {
                syn::Item::Use(u) => Some(use_leaves(u)),
                _ => None,
            })
            .flatten()
            .collect();
        for l in leaves.iter().filter(|l| l.name.as_deref() == Some(name)) {
            if let Some(t) = self.resolve_in(m, &l.path, seen) {
                return Some(t);
            }
        }
        // A name a macro call here makes (a guess: see `macro_made_name`).
        if let Some(i) = module
            .items
            .iter()
            .position(|it| is_call(it) && item_name(it).as_deref() == Some(name))
        {
            return Some(Target::Item(m, i));
        }
        for l in leaves.iter().filter(|l| l.name.is_none()) {
            if let Some(Target::Module(g)) = self.resolve_in(m, &l.path, seen)
                && g != m
                && let Some(t) = self.lookup_in(g, name, seen)
            {
                return Some(t);
            }
        }
        None
    }

    /// What a path written in module `m` names: it resolves segment by
    /// segment and stops at the first item (what follows an item is an
    /// associated name). `None` for a name outside the crate.
    pub fn resolve(&self, m: usize, path: &[String]) -> Option<Target> {
        self.resolve_in(m, path, &mut Seen::new())
    }

    fn resolve_in(&self, m: usize, path: &[String], seen: &mut Seen) -> Option<Target> {
        let (first, rest) = path.split_first()?;
        let mut cur = match first.as_str() {
            "crate" => Target::Module(0),
            "self" => Target::Module(m),
            "super" => Target::Module(self.modules[m].parent),
            "::" => return None,
            name => self.lookup_in(m, name, seen)?,
        };
        for seg in rest {
            let Target::Module(cm) = cur else {
                return Some(cur);
            };
            cur = match seg.as_str() {
                "super" => Target::Module(self.modules[cm].parent),
                "self" => Target::Module(cm),
                name => self.lookup_in(cm, name, seen)?,
            };
        }
        Some(cur)
    }

    /// `true` when module `a` is `b` or one of its ancestors.
    pub fn encloses(&self, a: usize, mut b: usize) -> bool {
        loop {
            if a == b {
                return true;
            }
            if b == 0 {
                return false;
            }
            b = self.modules[b].parent;
        }
    }

    /// The file a target lives in.
    pub fn file_of(&self, t: Target) -> &Path {
        match t {
            Target::Module(m) | Target::Item(m, _) => &self.modules[m].file,
        }
    }
}

fn parse_file(p: &Path) -> Result<Vec<syn::Item>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(file.items)
}

/// The file of `mod name;` declared in `file` and the folder its own child
/// modules live in.
fn module_file(
    file: &Path,
    child_dir: &Path,
    name: &str,
    attrs: &[syn::Attribute],
) -> Result<(PathBuf, PathBuf), String> {
    for a in attrs.iter().filter(|a| a.path().is_ident("path")) {
        if let syn::Meta::NameValue(nv) = &a.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            let base = file.parent().unwrap_or(Path::new("."));
            let f = base.join(s.value());
            let d = f.with_extension("");
            return Ok((f, d));
        }
    }
    let flat = child_dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok((flat, child_dir.join(name)));
    }
    let nested = child_dir.join(name).join("mod.rs");
    if nested.is_file() {
        return Ok((nested, child_dir.join(name)));
    }
    Err(format!(
        "{}: `mod {name};` has neither {} nor {}",
        file.display(),
        flat.display(),
        nested.display()
    ))
}

/// Names seen once (a guard for walks over re-exports).
pub type Seen = HashSet<(usize, String)>;
