//! The layout gate of `agent/src` (the checks: `tests/layout/gate.rs`, shared by every crate of
//! the workspace): no import cycle among files or modules, at most [`POLICY`]'s `max_upward`
//! imports up the layers, every top-level module placed in the layers, no source file over 600
//! lines and no function over 80. This crate's gate also tests the parser on known input and that
//! every workspace member has a gate.
//!
//! A new top-level module goes into the layers at the layer it belongs to; a failure names the
//! cycle (file → file → …) or the upward imports, so the fix is to move the shared piece down.

#[macro_use]
#[path = "../../tests/layout/gate.rs"]
mod gate;

use gate::Policy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const POLICY: Policy = Policy {
    dir: env!("CARGO_MANIFEST_DIR"),
    lib: "wattflip_agent",
    layers: &[
        ("app", 1),
        ("config", 2),
        ("report", 3),
        ("probes", 4),
        ("drives", 5),
        ("energy", 5),
        ("export", 5),
        ("sensors", 6),
        ("clock", 6),
        ("events", 6),
    ],
    // The bound on imports that run upward (a lower layer reaching a higher one).
    max_upward: 2,
    min_imports: 50,
    tables: &[],
    allow: &[],
};

layout_tests!(POLICY);

#[test]
fn every_workspace_member_has_a_layout_gate() {
    gate::check_every_member_is_gated(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap());
}

fn strings(paths: &[&[&str]]) -> Vec<Vec<String>> {
    paths.iter().map(|p| p.iter().map(|s| s.to_string()).collect()).collect()
}

/// The parser itself, on known input: a gate that reads nothing would pass everything.
#[test]
fn the_parser_reads_groups_aliases_super_and_skips_comments_strings_and_tests() {
    let leaves = gate::parse::parse_paths("{a::B, c::{self, D as E, f::G}, h::*}; x");
    let names: Vec<&str> = leaves.iter().map(|(_, n)| n.as_str()).collect();
    let paths: Vec<Vec<String>> = leaves.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(paths, strings(&[&["a", "B"], &["c"], &["c", "D"], &["c", "f", "G"], &["h"]]));
    assert_eq!(names, ["B", "c", "E", "G", "*"]);

    let text = "use crate::a::B; // crate::c::D\nlet s = \"crate::e {\";\nlet c = '{';\n/* crate::g /* nested */ crate::h */\n#[cfg(test)]\nmod tests {\n use crate::f;\n}\n#[cfg(test)]\nmod more;\nfn x<'a>(_: &'a str) {}\n";
    let (code, test_children) = gate::parse::without_tests(&gate::parse::strip(text));
    assert_eq!(gate::parse::paths_after(&code, "crate::"), strings(&[&["a", "B"]]));
    assert_eq!(test_children, ["more"]);
    assert_eq!(code.lines().count(), text.lines().count(), "line numbers hold");
    assert!(code.contains("fn x<'a>(_: &'a str) {}"), "a lifetime is not a char literal: {code}");
    assert_eq!(gate::parse::long_functions("fn a() {\n    x;\n}\npub async fn b() {\n}\n", 2), vec![("a".to_string(), 1, 3)]);

    let mut g = BTreeMap::new();
    g.insert(PathBuf::from("a.rs"), vec![PathBuf::from("b.rs")]);
    g.insert(PathBuf::from("b.rs"), vec![PathBuf::from("a.rs")]);
    assert_eq!(gate::find_cycles(&g), vec![vec![PathBuf::from("a.rs"), PathBuf::from("b.rs"), PathBuf::from("a.rs")]]);
    // A cycle between modules that is none between files: command → nvme_cli/feature.rs,
    // nvme_cli/mod.rs → command.
    let e: BTreeMap<(PathBuf, PathBuf), String> =
        [(("command.rs", "nvme_cli/feature.rs"), "nvme_cli::NvmeStatus"), (("nvme_cli/mod.rs", "command.rs"), "command::CommandError")]
            .into_iter()
            .map(|((a, b), p)| ((PathBuf::from(a), PathBuf::from(b)), p.to_string()))
            .collect();
    assert!(gate::find_cycles(&gate::graph(e.keys())).is_empty());
    let cycles = gate::module_cycles(&e);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].starts_with("modules of crate: command -> nvme_cli -> command"), "{}", cycles[0]);

    // A path through a re-export names the file that defines the item.
    let module = |m: &[&str], f: &str| (m.iter().map(|s| s.to_string()).collect::<Vec<_>>(), PathBuf::from(f));
    let c = gate::Crate {
        modules: [module(&[], "lib.rs"), module(&["engine"], "engine.rs"), module(&["buf"], "buf.rs")].into_iter().collect(),
        code: BTreeMap::new(),
        lines: BTreeMap::new(),
        uses: [(PathBuf::from("engine.rs"), [("AlignedBuf".to_string(), strings(&[&["buf", "AlignedBuf"]]).remove(0))].into_iter().collect())]
            .into_iter()
            .collect(),
        root: PathBuf::from("lib.rs"),
    };
    assert_eq!(gate::resolve(&c, &strings(&[&["engine", "AlignedBuf", "new"]])[0]), Some(PathBuf::from("buf.rs")));
    assert_eq!(gate::resolve(&c, &strings(&[&["engine", "run"]])[0]), Some(PathBuf::from("engine.rs")));
}
