//! The crate's layers, read from its sources: `abi/` → `reference/` →
//! `frame/` → `scalar.rs` → `proof/`, each file importing only from its own
//! layer or the ones before it, and no two units importing each other, even
//! through a third (a unit is one file of `abi/` or `reference/`, or the
//! whole of `frame/`, `scalar.rs` or `proof/`). Every path into the crate
//! counts (`use crate::…`, a `crate::…` path in code, a macro's
//! `$crate::…`) but a macro's own name (an exported macro is at the root);
//! comments and `#[cfg(test)]` code do not (a test may use
//! what it needs to check a lower layer).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: [&str; 5] = ["abi", "reference", "frame", "scalar", "proof"];

/// A source file's unit and its layer's index.
fn unit_of(rel: &Path) -> Option<(String, usize)> {
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let layer = LAYERS.iter().position(|l| *l == parts[0])?;
    let unit = match (parts[0].as_str(), parts.get(1)) {
        ("abi" | "reference", Some(file)) if file != "mod" => format!("{}::{file}", parts[0]),
        _ => parts[0].clone(),
    };
    Some((unit, layer))
}

/// The unit a `crate::…` path names.
fn unit_of_path(path: &str) -> Option<(String, usize)> {
    let mut parts = path.split("::");
    let top = parts.next()?;
    let layer = LAYERS.iter().position(|l| *l == top)?;
    let unit = match (top, parts.next()) {
        ("abi" | "reference", Some(m)) if m.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
            format!("{top}::{m}")
        }
        _ => top.to_string(),
    };
    Some((unit, layer))
}

/// The code of a file without its comments and its test code: everything
/// from a `#[cfg(test)]` line on (the crate keeps its test modules last),
/// and whole files that are test modules.
fn code(path: &Path, text: &str) -> String {
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every `crate::a::b` path in `code`, with the braces of a `use` list
/// expanded one level (`crate::abi::{table::X, tile::Y}`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `qlinear_kernels_core::…` is another crate's path to this one; an
        // identifier ending in `crate` is not a path root
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{'))
            .unwrap_or(rest.len());
        let head = &rest[..end];
        // a `#[macro_export]` macro lives at the crate's root, whatever
        // file defines it
        if rest[end..].starts_with('!') {
            continue;
        }
        match head.find('{') {
            Some(b) => {
                let close = rest.find('}').unwrap_or(rest.len());
                for item in rest[b + 1..close].split(',') {
                    paths.push(format!("{}{}", &head[..b], item.trim()));
                }
            }
            None => paths.push(head.to_string()),
        }
    }
    paths
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `unit → units it imports`, over the crate's sources.
fn imports() -> BTreeMap<String, BTreeSet<(String, usize)>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<(String, usize)>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let Some((unit, _)) = unit_of(rel) else {
            assert_eq!(rel, Path::new("lib.rs"), "{} is in no layer", rel.display());
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let edges = graph.entry(unit.clone()).or_default();
        for path in crate_paths(&code(&file, &text)) {
            let target = unit_of_path(&path).unwrap_or_else(|| {
                panic!(
                    "{}: `crate::{path}` goes through lib.rs's re-exports, not by module path",
                    rel.display()
                )
            });
            if target.0 != unit {
                edges.insert(target);
            }
        }
    }
    graph
}

#[test]
fn no_file_imports_from_a_layer_above_its_own() {
    let graph = imports();
    assert!(
        graph.contains_key("abi::table") && graph.contains_key("frame"),
        "{graph:?}"
    );
    let layer = |unit: &str| unit_of_path(unit).unwrap().1;
    let mut upward = Vec::new();
    for (unit, edges) in &graph {
        for (to, to_layer) in edges {
            if *to_layer > layer(unit) {
                upward.push(format!("{unit} → {to}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports running back up: {upward:?}");
}

#[test]
fn no_two_units_import_each_other() {
    let graph = imports();
    // depth-first from every unit: a path back to it is a loop
    for start in graph.keys() {
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((unit, trail)) = stack.pop() {
            for (to, _) in graph.get(&unit).into_iter().flatten() {
                assert!(to != start, "an import loop: {} → {to}", trail.join(" → "));
                if seen.insert(to.clone()) {
                    let mut next = trail.clone();
                    next.push(to.clone());
                    stack.push((to.clone(), next));
                }
            }
        }
    }
}

#[test]
fn the_checker_sees_paths_lists_and_loops() {
    // the parsing the two tests above rely on, by hand
    let paths = crate_paths(
        "use crate::abi::table::KernelTable;\nuse crate::abi::{tile::Tile, rows::LayoutCache};\n$crate::frame::x(); qlinear_kernels_core::proof::y(); crate::panel_entry!(f);\n",
    );
    assert_eq!(
        paths,
        [
            "abi::table::KernelTable",
            "abi::tile::Tile",
            "abi::rows::LayoutCache",
            "frame::x"
        ]
    );
    assert_eq!(unit_of_path("abi::tile::Tile"), Some(("abi::tile".into(), 0)));
    assert_eq!(unit_of_path("frame::panels::x"), Some(("frame".into(), 2)));
    assert_eq!(unit_of_path("KernelTable"), None);
    assert_eq!(
        unit_of(Path::new("reference/dot.rs")),
        Some(("reference::dot".into(), 1))
    );
    assert_eq!(unit_of(Path::new("frame/rows.rs")), Some(("frame".into(), 2)));
    let text = "use crate::frame::x; // crate::proof::y\n#[cfg(test)]\nmod tests { use crate::proof::z; }\n";
    assert_eq!(crate_paths(&code(Path::new("a.rs"), text)), ["frame::x"]);
}
