//! No module of any of cinch's crates imports, directly or through others, a module that imports
//! it back: each crate's modules form layers (docs/architecture.md, "Modules"). Read from the
//! sources: every `crate::a::b` and `super::a` path outside comments and test modules is an edge
//! to the module it names. cinch-core's modules are also laid out by stage, and a stage imports
//! only the stages before it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 9] = [
    "optimizer/src",
    "optimizer/core/src",
    "optimizer/service/src",
    "optimizer/sim/src",
    "plugin/src",
    "plugin/spank/src",
    "plugin/guard/src",
    "plugin/http/src",
    "plugin/watch/src",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each module of the crate under `root` (`agent/view` for `agent/view.rs`, `agent` for
/// `agent/mod.rs`) and its file.
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().with_extension("");
                let name = rel.to_string_lossy().into_owned();
                let name = name.strip_suffix("/mod").unwrap_or(&name).to_string();
                out.insert(name, path);
            }
        }
    }
    out
}

/// The code of a file without its test module and comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers after each `prefix` in `code`: `crate::a::b` gives `[a, b]`, and a group
/// `crate::{a, b::c}` gives `[a]` and `[b, c]`.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    // The path's identifiers, up to the first segment that does not end where `::` does.
    let ident = |s: &str| -> Vec<String> {
        let mut path = Vec::new();
        for segment in s.split("::") {
            let name: String = segment
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let whole = name.len() == segment.len();
            if !name.is_empty() {
                path.push(name);
            }
            if !whole || path.is_empty() {
                break;
            }
        }
        path
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `cinch_core::...`, `mycrate::`
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(body.split(',').map(|item| ident(item.trim())));
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// The modules each module of the crate under `root` names.
fn edges(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(root);
    let mut graph = BTreeMap::new();
    for (name, path) in &mods {
        let code = code(path);
        let parent = name.rsplit_once('/').map_or("", |(p, _)| p);
        let mut deps = BTreeSet::new();
        for (prefix, base) in [("crate::", ""), ("super::", parent)] {
            if prefix == "super::" && (name == "lib" || name == "main") {
                continue;
            }
            for path in paths_after(&code, prefix) {
                // The longest module the path names: `agent::view::JobView` -> agent/view.
                for k in (1..=path.len().min(2)).rev() {
                    let target = path[..k].join("/");
                    let target = if base.is_empty() {
                        target
                    } else {
                        format!("{base}/{target}")
                    };
                    if mods.contains_key(&target) {
                        if &target != name {
                            deps.insert(target);
                        }
                        break;
                    }
                }
            }
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// cinch-core's stages, each a folder of `optimizer/core/src`, in the order they may import each
/// other: a module imports only its own stage and the ones before it (`testing`, scenario
/// builders for tests, comes last).
const CORE_STAGES: [&str; 9] = [
    "util", "slurm", "wire", "net", "models", "learn", "policy", "enact", "testing",
];

/// The imports of `graph` that point from a stage of [`CORE_STAGES`] to a later one, as
/// "from -> to", and the modules in no stage.
fn upward_arrows(graph: &BTreeMap<String, BTreeSet<String>>) -> (Vec<String>, Vec<String>) {
    let stage = |module: &str| {
        let first = module.split('/').next().unwrap_or(module);
        CORE_STAGES.iter().position(|s| *s == first)
    };
    let mut up = Vec::new();
    let mut unplaced = Vec::new();
    for (from, deps) in graph {
        // The crate root declares the stages; a test module's files may use `testing`.
        if from == "lib" || from.ends_with("/tests") || from.contains("/tests/") {
            continue;
        }
        let Some(at) = stage(from) else {
            unplaced.push(from.clone());
            continue;
        };
        for to in deps {
            if stage(to).is_some_and(|s| s > at) {
                up.push(format!("{from} -> {to}"));
            }
        }
    }
    (up, unplaced)
}

#[test]
fn cinch_core_stages_import_only_the_stages_before_them() {
    let graph = edges(&repo().join("optimizer/core/src"));
    let (up, unplaced) = upward_arrows(&graph);
    assert!(
        unplaced.is_empty(),
        "modules outside cinch-core's stages (optimizer/tests/modules.rs, CORE_STAGES): {unplaced:?}"
    );
    assert!(
        up.is_empty(),
        "imports from a stage to a later one (docs/architecture.md, \"Modules\"): {up:?}"
    );
    // Every stage holds something, so the order above is the one the code has.
    for stage in CORE_STAGES {
        assert!(
            graph.keys().any(|m| m.split('/').next() == Some(stage)),
            "no module in stage {stage}"
        );
    }
    // And the check finds an arrow up and a module outside the stages.
    let wrong: BTreeMap<String, BTreeSet<String>> = [
        ("wire/snapshot", vec!["models/qos", "slurm/gres"]),
        ("models/qos", vec!["wire/snapshot"]),
        ("stray", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        upward_arrows(&wrong),
        (
            vec!["wire/snapshot -> models/qos".to_string()],
            vec!["stray".to_string()]
        )
    );
}

#[test]
fn the_module_graph_of_every_crate_has_no_cycle() {
    for krate in CRATES {
        let graph = edges(&repo().join(krate));
        assert!(
            graph.len() > 1 || krate.starts_with("plugin/"),
            "{krate}: {graph:?}"
        );
        if let Some(cycle) = a_cycle(&graph) {
            panic!("{krate}: modules import each other: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_finds_imports_and_the_check_finds_a_cycle() {
    let code = "use crate::sim_common::{config, mark};\nuse super::{view, owned::X};\n\
                let x = crate::share::build(); cinch_core::models::hints::x(); my_crate::a();";
    let owned = |paths: &[&[&str]]| -> Vec<Vec<String>> {
        paths
            .iter()
            .map(|p| p.iter().map(|s| s.to_string()).collect())
            .collect()
    };
    assert_eq!(
        paths_after(code, "crate::"),
        owned(&[&["sim_common"], &["share", "build"]])
    );
    assert_eq!(
        paths_after(code, "super::"),
        owned(&[&["view"], &["owned"]])
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(a_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let mut acyclic = graph.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(a_cycle(&acyclic), None);
}

/// The most lines of code (not blank, not comment, outside the test module) a file of
/// cinch-core may have, and the most lines a function may run (issue 59's targets: a file or a
/// function past them mixes steps that want names of their own).
const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 120;

/// `code` with string and character literals emptied and comments cut, so that braces left are
/// the code's own (a lifetime `'a` is kept).
fn braces_only(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                out.extend((chars[i] == '\n').then_some('\n'));
                i += 1;
            }
            i += 2;
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#, as many hashes at the end as at the start.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(ch) => {
                        out.extend((*ch == '\n').then_some('\n'));
                        j += 1;
                    }
                }
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                out.extend((chars.get(i) == Some(&'\n')).then_some('\n'));
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character: '\n', '\'', '\u{7f}'.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            out.push_str("' '");
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Each function with a body in `code` (read by [`braces_only`]), as its name and the lines
/// from its `fn` to its closing brace (of [`code`]'s text: comment lines are not counted).
fn fn_lengths(code: &str) -> Vec<(String, usize)> {
    let code = braces_only(code);
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let rest = &code[at + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(u32) -> u32`, a pointer type
        }
        // The body opens at the first `{` outside the signature's brackets; a `;` first is a
        // declaration without one.
        let (mut depth, mut open) = (0i32, None);
        for (k, b) in rest.bytes().enumerate() {
            match b {
                b'(' | b'[' | b'<' => depth += 1,
                b')' | b']' => depth -= 1,
                b'>' if k > 0 && rest.as_bytes()[k - 1] != b'-' => depth -= 1,
                b';' if depth <= 0 => break,
                b'{' if depth <= 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let body = &rest[open..];
        let mut level = 0;
        let mut end = body.len();
        for (k, b) in body.bytes().enumerate() {
            match b {
                b'{' => level += 1,
                b'}' => {
                    level -= 1;
                    if level == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = code[at..(at + 3 + open + end + 1).min(code.len())]
            .lines()
            .count();
        out.push((name, lines));
    }
    out
}

/// A file's lines of code: not blank and not comment, outside its test module.
fn lines_of_code(path: &Path) -> usize {
    code(path).lines().filter(|l| !l.trim().is_empty()).count()
}

#[test]
fn no_file_of_cinch_core_runs_past_800_lines_of_code_nor_a_function_past_120() {
    let root = repo().join("optimizer/core/src");
    let mut long_files = Vec::new();
    let mut long_fns = Vec::new();
    let mut functions = 0;
    for (name, path) in modules(&root) {
        // Test modules kept in files of their own are tests, not the core.
        if name.ends_with("/tests") || name.contains("/tests/") {
            continue;
        }
        let lines = lines_of_code(&path);
        if lines > MAX_FILE_LINES {
            long_files.push(format!("{name}: {lines} lines of code"));
        }
        for (f, len) in fn_lengths(&code(&path)) {
            functions += 1;
            if len > MAX_FN_LINES {
                long_fns.push(format!("{name}::{f}: {len} lines"));
            }
        }
    }
    assert!(functions > 500, "only {functions} functions read");
    assert!(
        long_files.is_empty(),
        "files over {MAX_FILE_LINES} lines of code (split them by step, docs/architecture.md): {long_files:?}"
    );
    assert!(
        long_fns.is_empty(),
        "functions over {MAX_FN_LINES} lines (name their steps, docs/architecture.md): {long_fns:?}"
    );
}

#[test]
fn the_length_reader_sees_past_literals_and_declarations() {
    let code = "fn short<'a>(x: &'a str) -> Vec<u32> where u32: Copy {\n    let b = '{';\n    \
                let s = \"}}{\";\n    let r = r#\"{\"}\"#;\n    vec![1]\n}\n\
                trait T { fn declared(&self) -> u32; }\n\
                fn long() {\n    if true {\n        let _ = 1;\n    }\n}\n\
                fn takes(f: fn(u32) -> u32) -> u32 { f(1) }\n";
    assert_eq!(
        fn_lengths(code),
        vec![
            ("short".to_string(), 6),
            ("long".to_string(), 5),
            ("takes".to_string(), 1)
        ]
    );
    let dir = std::env::temp_dir().join(format!("cinch-modules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.rs");
    std::fs::write(
        &file,
        "// a comment\n\nfn a() {}\n   // another\nfn b() {}\n#[cfg(test)]\nmod tests {\n fn t() {}\n}\n",
    )
    .unwrap();
    assert_eq!(lines_of_code(&file), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
