//! The layout gate of every crate in the workspace: imports run one way, files and functions stay
//! short. Each crate's `tests/layout.rs` includes this file by `#[path]` (as
//! `agent/tests/support/counting_alloc.rs` is shared), states its [`Policy`] and expands
//! [`layout_tests!`]; the agent's gate also checks that every workspace member has one.
//!
//! Why one file included per crate rather than one test (in the e2e crate) that walks the
//! workspace: `cargo test -p <crate>`, what a change to one crate runs, then gates that crate
//! without building the end-to-end harness, and a crate's policy (its layers, its tables, its
//! allow-list) stands next to the code it governs.
//!
//! What is read: every `crate::…` and `super::…` path of the crate's files (and `<lib>::…` of a
//! `main.rs` beside a `lib.rs`), with comments, string and char literals and `#[cfg(test)]` items
//! left out. A path is followed through `use` re-exports (`crate::ProbeError` is the file that
//! defines it, not `lib.rs`); a parent naming its own child module by a relative path is the
//! module tree, not an import. From the file graph: no cycle among files, imports that run up
//! the [`Policy::layers`] counted against [`Policy::max_upward`], no file over [`MAX_LINES`]
//! lines (files listed in [`Policy::tables`] aside: value tables without functions) and no
//! function over [`MAX_FN_LINES`].
//!
//! A break that waits for its owner goes into [`Policy::allow`] naming the owner and the issue;
//! the gate fails on an entry that is no longer needed, so it is removed when the break is fixed.
//! A failure names the cycle (file → file → …) or the upward imports: move the shared piece down.

// Each crate's gate uses its own subset (only the agent's runs the parser's self-test and the
// workspace check).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "parse.rs"]
pub mod parse;
use parse::{long_functions, module_of, paths_after, strip, uses_of, without_tests};

/// No source file longer than this, except the crate's listed [`Policy::tables`].
pub const MAX_LINES: usize = 600;

/// No function longer than this.
pub const MAX_FN_LINES: usize = 80;

/// One crate's rules.
pub struct Policy {
    /// The crate's directory (`env!("CARGO_MANIFEST_DIR")`); the gate reads its `src/`.
    pub dir: &'static str,
    /// How `main.rs` names the crate's library (`wattflip_agent`); empty when `main.rs` is the
    /// crate root (no `lib.rs`).
    pub lib: &'static str,
    /// Top-level modules by layer from the top (1) down; `main.rs` and `lib.rs` are layer 0. A
    /// file may import its own layer's files (without a cycle) and lower layers. Empty: the crate
    /// has no layers (a few files side by side), and only cycles are checked.
    pub layers: &'static [(&'static str, u32)],
    /// How many imports may run upward (a lower layer reaching a higher one).
    pub max_upward: usize,
    /// The fewest imports between files the parser must find: a gate that reads nothing would
    /// pass everything.
    pub min_imports: usize,
    /// Files (relative to `src/`) that are pure value tables, exempt from [`MAX_LINES`]; such a
    /// file defines no function.
    pub tables: &'static [&'static str],
    /// Known breaks that wait for their owner (see [`Allow`]).
    pub allow: &'static [Allow],
}

/// A known break of one rule in one file, kept until its owner fixes it.
pub struct Allow {
    /// The file, relative to `src/`.
    pub file: &'static str,
    pub rule: Rule,
    /// Who fixes it, and where it is tracked (e.g. "the lead, issue 25 item 1").
    pub owner: &'static str,
}

pub enum Rule {
    /// The file may be over [`MAX_LINES`] lines.
    Lines,
    /// The file's functions may be over [`MAX_FN_LINES`] lines.
    Functions,
    /// The file's import of this other file (relative to `src/`) is left out of the cycle and
    /// layer checks.
    Import(&'static str),
}

/// The gate's tests for one crate's policy: `layout_tests!(POLICY);` in the crate's
/// `tests/layout.rs`, after `#[macro_use] #[path = "…/tests/layout/gate.rs"] mod gate;`.
macro_rules! layout_tests {
    ($policy:expr) => {
        #[test]
        fn no_import_cycle_among_files() {
            gate::check_cycles(&$policy);
        }

        #[test]
        fn imports_run_down_the_layers() {
            gate::check_layers(&$policy);
        }

        #[test]
        fn no_source_file_over_600_lines() {
            gate::check_file_lengths(&$policy);
        }

        #[test]
        fn no_function_over_80_lines() {
            gate::check_function_lengths(&$policy);
        }

        #[test]
        fn every_allowance_is_still_needed() {
            gate::check_allowances(&$policy);
        }
    };
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut entries: Vec<_> = read.map(|e| e.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())).path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// One crate's files, read.
pub struct Crate {
    /// Module path → file (relative to `src/`).
    pub modules: BTreeMap<Vec<String>, PathBuf>,
    /// File → its code, comments, literals and tests left out.
    pub code: BTreeMap<PathBuf, String>,
    /// File → line count (tests included).
    pub lines: BTreeMap<PathBuf, usize>,
    /// File → the names its `use` declarations bring in, with their absolute paths.
    pub uses: BTreeMap<PathBuf, BTreeMap<String, Vec<String>>>,
    /// The crate's root file (`lib.rs`, or `main.rs` when there is no library).
    pub root: PathBuf,
}

pub fn load(p: &Policy) -> Crate {
    let src = Path::new(p.dir).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let root = if p.lib.is_empty() { PathBuf::from("main.rs") } else { PathBuf::from("lib.rs") };
    let mut c = Crate { modules: BTreeMap::new(), code: BTreeMap::new(), lines: BTreeMap::new(), uses: BTreeMap::new(), root };
    let mut test_files = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap_or(&f).to_path_buf();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        c.lines.insert(rel.clone(), text.lines().count());
        let (code, test_children) = without_tests(&strip(&text));
        let module = module_of(&rel);
        test_files.extend(test_children.into_iter().map(|t| module.iter().cloned().chain(std::iter::once(t)).collect::<Vec<_>>()));
        if rel != Path::new("main.rs") || p.lib.is_empty() {
            c.modules.insert(module, rel.clone());
        }
        c.code.insert(rel, code);
    }
    // A test-only child module's file is test code: no imports, no function limit.
    for m in test_files {
        if let Some(f) = c.modules.get(&m) {
            c.code.insert(f.clone(), String::new());
        }
    }
    let uses: Vec<(PathBuf, BTreeMap<String, Vec<String>>)> = c.modules.iter().map(|(m, f)| (f.clone(), uses_of(&c.code[f], m, &c.modules))).collect();
    c.uses.extend(uses);
    c
}

/// The file a path names: the longest module prefix of `path` that is a file of the crate, and
/// through that file's `use` of the next name to where the name comes from.
pub fn resolve(c: &Crate, path: &[String]) -> Option<PathBuf> {
    let mut path = path.to_vec();
    let mut file = None;
    for _ in 0..16 {
        let n = (0..=path.len()).rev().find(|n| c.modules.contains_key(&path[..*n]))?;
        let f = c.modules[&path[..n]].clone();
        let through = path.get(n).and_then(|name| c.uses.get(&f).and_then(|u| u.get(name)));
        match through {
            Some(target) if target.as_slice() != &path[..n + 1] => {
                path = target.iter().chain(&path[n + 1..]).cloned().collect();
                file = Some(f);
            }
            _ => return Some(f),
        }
    }
    file
}

/// Edges file → file, each with the path that makes it.
pub fn edges(c: &Crate, p: &Policy) -> BTreeMap<(PathBuf, PathBuf), String> {
    let mut e = BTreeMap::new();
    for (file, code) in &c.code {
        let is_bin = file == Path::new("main.rs") && !p.lib.is_empty();
        let module = module_of(file);
        let mut named: Vec<Vec<String>> = Vec::new();
        let prefix = if is_bin { format!("{}::", p.lib) } else { "crate::".to_string() };
        named.extend(paths_after(code, &prefix));
        if !is_bin {
            // `super::` from a file is its parent module; `super::super::` one more up.
            for path in paths_after(code, "super::") {
                let mut base = module.clone();
                base.pop();
                let mut path = path;
                while path.first().is_some_and(|s| s == "super") {
                    path.remove(0);
                    base.pop();
                }
                named.push(base.into_iter().chain(path).collect());
            }
        }
        for path in named {
            if let Some(target) = resolve(c, &path) {
                if &target != file && target != c.root {
                    e.entry((file.clone(), target)).or_insert_with(|| path.join("::"));
                }
            }
        }
    }
    e
}

fn allowed_imports(p: &Policy) -> BTreeSet<(PathBuf, PathBuf)> {
    p.allow
        .iter()
        .filter_map(|a| match a.rule {
            Rule::Import(to) => Some((PathBuf::from(a.file), PathBuf::from(to))),
            _ => None,
        })
        .collect()
}

fn layer(p: &Policy, file: &Path) -> Option<u32> {
    if file == Path::new("main.rs") || file == Path::new("lib.rs") {
        return Some(0);
    }
    let top = file.iter().next()?.to_string_lossy().trim_end_matches(".rs").to_string();
    p.layers.iter().find(|(m, _)| *m == top).map(|(_, l)| *l)
}

pub type Graph = BTreeMap<PathBuf, Vec<PathBuf>>;

pub fn graph<'a>(e: impl IntoIterator<Item = &'a (PathBuf, PathBuf)>) -> Graph {
    let mut g: Graph = BTreeMap::new();
    for (a, b) in e {
        g.entry(a.clone()).or_default().push(b.clone());
    }
    g
}

/// One cycle through each tangle of the graph (depth-first search; each cycle in file order).
pub fn find_cycles(graph: &Graph) -> Vec<Vec<PathBuf>> {
    fn visit(n: &PathBuf, graph: &Graph, state: &mut BTreeMap<PathBuf, u8>, stack: &mut Vec<PathBuf>, out: &mut Vec<Vec<PathBuf>>) {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    // `m` is on the stack (state 1), so the cycle starts there.
                    let from = stack.iter().position(|x| x == m).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(m.clone());
                    out.push(cycle);
                }
                0 => visit(m, graph, state, stack, out),
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
    }
    let mut state = BTreeMap::new();
    let mut out = Vec::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            visit(n, graph, &mut state, &mut Vec::new(), &mut out);
        }
    }
    out
}

/// Cycles among modules: at each level of the module tree, its children (a file, or a folder
/// module with everything under it) as nodes, an import between two of them as an edge (a file
/// naming its ancestor or descendant is the tree, not an edge). `command.rs` → `nvme_cli/feature.rs`
/// and `nvme_cli/mod.rs` → `command.rs` is no cycle among files but one between the modules
/// `command` and `nvme_cli`. Each cycle is shown as `level: a → b → a`, with one import per step.
pub fn module_cycles<'a>(e: impl IntoIterator<Item = (&'a (PathBuf, PathBuf), &'a String)>) -> Vec<String> {
    type Level = Vec<String>;
    let mut levels: BTreeMap<Level, BTreeMap<(PathBuf, PathBuf), String>> = BTreeMap::new();
    for ((a, b), path) in e {
        let (ma, mb) = (module_of(a), module_of(b));
        let k = ma.iter().zip(&mb).take_while(|(x, y)| x == y).count();
        if ma.len() > k && mb.len() > k {
            let step = format!("{} -> {} ({path})", a.display(), b.display());
            levels.entry(ma[..k].to_vec()).or_default().entry((PathBuf::from(&ma[k]), PathBuf::from(&mb[k]))).or_insert(step);
        }
    }
    let mut out = Vec::new();
    for (level, edges) in &levels {
        for cycle in find_cycles(&graph(edges.keys())) {
            let names: Vec<String> = cycle.iter().map(|n| n.display().to_string()).collect();
            let steps: Vec<&str> = cycle.windows(2).map(|w| edges[&(w[0].clone(), w[1].clone())].as_str()).collect();
            let at = if level.is_empty() { "crate".to_string() } else { level.join("::") };
            out.push(format!(
                "modules of {at}: {}
    {}",
                names.join(" -> "),
                steps.join("\n    ")
            ));
        }
    }
    out
}

fn show(cycle: &[PathBuf], e: &BTreeMap<(PathBuf, PathBuf), String>) -> String {
    cycle.windows(2).map(|w| format!("{} --({})--> {}", w[0].display(), e[&(w[0].clone(), w[1].clone())], w[1].display())).collect::<Vec<_>>().join("\n    ")
}

/// The crate's `src/` as the workspace names it (`collector/src`), for messages.
fn name(p: &Policy) -> String {
    let dir = Path::new(p.dir);
    let workspace = dir.ancestors().skip(1).find(|a| std::fs::read_to_string(a.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")));
    let rel = workspace.and_then(|w| dir.strip_prefix(w).ok()).unwrap_or(dir);
    format!("{}/src", rel.display())
}

pub fn check_cycles(p: &Policy) {
    let c = load(p);
    let e = edges(&c, p);
    assert!(e.len() >= p.min_imports, "the parser found only {} imports in {}; it no longer reads the code", e.len(), name(p));
    println!("{} imports between {} files", e.len(), c.code.len());
    let allowed = allowed_imports(p);
    let kept: BTreeMap<(PathBuf, PathBuf), String> = e.iter().filter(|(k, _)| !allowed.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut shown: Vec<String> = find_cycles(&graph(kept.keys())).iter().map(|cy| format!("files: {}", show(cy, &e))).collect();
    shown.extend(module_cycles(&kept));
    assert!(shown.is_empty(), "import cycles in {} (move the shared piece down):\n  - {}", name(p), shown.join("\n  - "));
}

pub fn check_layers(p: &Policy) {
    if p.layers.is_empty() {
        return;
    }
    let c = load(p);
    let unplaced: BTreeSet<String> =
        c.code.keys().filter(|f| layer(p, f).is_none()).filter_map(|f| f.iter().next()).map(|s| s.to_string_lossy().into_owned()).collect();
    assert!(unplaced.is_empty(), "top-level modules of {} not in the layers of its tests/layout.rs: {unplaced:?}; place each at its layer", name(p));
    let allowed = allowed_imports(p);
    let upward: Vec<String> = edges(&c, p)
        .into_iter()
        .filter(|((a, b), _)| layer(p, b) < layer(p, a) && !allowed.contains(&(a.clone(), b.clone())))
        .map(|((a, b), path)| format!("{} -> {} ({path})", a.display(), b.display()))
        .collect();
    println!("upward imports ({}):\n  {}", upward.len(), upward.join("\n  "));
    assert!(upward.len() <= p.max_upward, "{} imports run upward in {} (at most {}):\n  {}", upward.len(), name(p), p.max_upward, upward.join("\n  "));
}

fn allowed(p: &Policy, file: &Path, rule: fn(&Rule) -> bool) -> bool {
    p.allow.iter().any(|a| Path::new(a.file) == file && rule(&a.rule))
}

pub fn check_file_lengths(p: &Policy) {
    let c = load(p);
    let long: Vec<String> = c
        .lines
        .iter()
        .filter(|(f, n)| **n > MAX_LINES && !p.tables.iter().any(|t| Path::new(t) == *f) && !allowed(p, f, |r| matches!(r, Rule::Lines)))
        .map(|(f, n)| format!("{} ({n} lines)", f.display()))
        .collect();
    assert!(long.is_empty(), "{} files over {MAX_LINES} lines: {}; split them by concern", name(p), long.join(", "));
    for t in p.tables {
        let code = c.code.get(Path::new(t)).unwrap_or_else(|| panic!("{t}, listed as a table of {}, is not a file there", name(p)));
        assert!(long_functions(code, 0).is_empty(), "{t} is listed as a pure table of {} but defines functions; move them out", name(p));
    }
}

pub fn check_function_lengths(p: &Policy) {
    let c = load(p);
    let long: Vec<String> = c
        .code
        .iter()
        .filter(|(f, _)| !allowed(p, f, |r| matches!(r, Rule::Functions)))
        .flat_map(|(f, code)| long_functions(code, MAX_FN_LINES).into_iter().map(move |(n, at, len)| format!("{}:{at}: fn {n} ({len} lines)", f.display())))
        .collect();
    assert!(long.is_empty(), "{} functions over {MAX_FN_LINES} lines: {}; split them", name(p), long.join(", "));
}

/// Whether `to` reaches `from` in the graph: the import `from → to` closes a cycle.
fn reaches(g: &Graph, to: &Path, from: &Path) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![to.to_path_buf()];
    while let Some(n) = todo.pop() {
        if n == from {
            return true;
        }
        if seen.insert(n.clone()) {
            todo.extend(g.get(&n).into_iter().flatten().cloned());
        }
    }
    false
}

/// Every entry of the allow-list still names a break; one that does not is removed.
pub fn check_allowances(p: &Policy) {
    let c = load(p);
    let e = edges(&c, p);
    let g = graph(e.keys());
    let stale: Vec<String> = p
        .allow
        .iter()
        .filter(|a| {
            let f = Path::new(a.file);
            match a.rule {
                Rule::Lines => c.lines.get(f).is_none_or(|n| *n <= MAX_LINES),
                Rule::Functions => c.code.get(f).is_none_or(|code| long_functions(code, MAX_FN_LINES).is_empty()),
                Rule::Import(to) => {
                    let to = Path::new(to);
                    !e.contains_key(&(f.to_path_buf(), to.to_path_buf())) || (!reaches(&g, to, f) && layer(p, to) >= layer(p, f))
                }
            }
        })
        .map(|a| format!("{} ({})", a.file, a.owner))
        .collect();
    assert!(stale.is_empty(), "allow-list entries of {} that no longer name a break, remove them: {}", name(p), stale.join(", "));
}

/// Every member of the workspace has a `tests/layout.rs` that includes this gate.
pub fn check_every_member_is_gated(workspace: &Path) {
    let manifest = std::fs::read_to_string(workspace.join("Cargo.toml")).unwrap_or_else(|e| panic!("cannot read the workspace Cargo.toml: {e}"));
    let members = manifest.split("members").nth(1).and_then(|s| s.split(']').next()).unwrap_or_default();
    let members: Vec<&str> = members.split('"').skip(1).step_by(2).collect();
    assert!(members.len() >= 5, "read only {members:?} as the workspace members");
    let ungated: Vec<&str> = members
        .iter()
        .filter(|m| workspace.join(m).join("src").is_dir())
        .filter(|m| {
            !std::fs::read_to_string(workspace.join(m).join("tests/layout.rs")).is_ok_and(|t| t.contains("layout/gate.rs") && t.contains("layout_tests!"))
        })
        .copied()
        .collect();
    assert!(ungated.is_empty(), "workspace members without a layout gate (tests/layout.rs including tests/layout/gate.rs): {ungated:?}");
}
