//! The layout stays one-way: no file of `src/` imports a file that (through any chain)
//! imports it back. A file's imports are every `crate::…` and `super::…` path it names,
//! the child modules it `use`s and the child modules it declares and names by a bare
//! path (`mod redeem;` … `redeem::redeem`), resolved to the file that defines the longest
//! matching module path; comments and `#[cfg(test)] mod tests` are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/accounting/ledger.rs` → `["accounting", "ledger"]`; `mod.rs`, `lib.rs`, `main.rs` name
/// their folder.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b` / `super::a` path in `code`, as segments.
fn paths(code: &str, keyword: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(keyword) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + keyword.len()..];
        // A word that only begins with the keyword ("superseded"), the keyword inside a
        // path (the second `super` of `super::super`, read with the first), or the
        // keyword without a path after it, names no module.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            || !rest.starts_with("::")
        {
            continue;
        }
        let mut segments = Vec::new();
        let mut tail = rest;
        while let Some(next) = tail.strip_prefix("::") {
            let name: String = next
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                break;
            }
            tail = &next[name.len()..];
            segments.push(name);
        }
        // `prefix::{a, b::c, self}` names `prefix::a`, `prefix::b`, and the prefix.
        if let Some(group) = tail.strip_prefix("::{") {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                match name.as_str() {
                    "" => {}
                    "self" => out.push(segments.clone()),
                    _ => out.push(segments.iter().cloned().chain([name]).collect()),
                }
            }
            continue;
        }
        out.push(segments);
    }
    out
}

/// Whether `code` names `child::…` as a path of its own (not `other_child::` nor
/// `a::child::`).
fn names_bare(code: &str, child: &str) -> bool {
    let needle = format!("{child}::");
    code.match_indices(&needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// Every file of `src/` and the files it imports.
fn import_edges(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let by_module: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_path(src, f), f.clone()))
        .collect();
    let resolve = |segments: &[String]| {
        (1..=segments.len())
            .rev()
            .find_map(|n| by_module.get(&segments[..n]).cloned())
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let me = module_path(src, file);
        let is_folder = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib" | "main")
        );
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut targets = Vec::new();
        for p in paths(&code, "crate") {
            targets.push(p);
        }
        let parent: Vec<String> = me[..me.len().saturating_sub(1)].to_vec();
        for p in paths(&code, "super") {
            // `super::super::x` climbs once more per `super`.
            let mut base = parent.clone();
            let mut rest = p.as_slice();
            while let Some((first, tail)) = rest.split_first()
                && first == "super"
            {
                base.pop();
                rest = tail;
            }
            targets.push(base.into_iter().chain(rest.iter().cloned()).collect());
        }
        // A child module declared here (`mod redeem;`) and named by a bare path
        // (`redeem::redeem`) is imported too.
        for line in code.lines() {
            let line = line.trim_start();
            let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
            let line = line.strip_prefix("pub ").unwrap_or(line);
            if let Some(child) = line.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
                && names_bare(&code, child.trim())
            {
                targets.push(
                    me.iter()
                        .cloned()
                        .chain([child.trim().to_owned()])
                        .collect(),
                );
            }
        }
        if is_folder {
            for line in code.lines() {
                let line = line.trim_start().trim_start_matches("pub ");
                if let Some(rest) = line.strip_prefix("use ")
                    && let Some((child, _)) = rest.split_once("::")
                    && !matches!(child, "crate" | "super" | "self" | "std")
                {
                    targets.push(me.iter().cloned().chain([child.to_owned()]).collect());
                }
            }
        }
        let set = edges.entry(file.clone()).or_default();
        for target in targets {
            if let Some(to) = resolve(&target)
                && to != *file
            {
                set.insert(to);
            }
        }
    }
    edges
}

/// The paths around every circle of `edges`, one per node that reaches itself.
fn circles_of<N: Ord + Clone>(
    edges: &BTreeMap<N, BTreeSet<N>>,
    name: impl Fn(&N) -> String,
) -> Vec<String> {
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut came_from: BTreeMap<&N, &N> = BTreeMap::new();
        let mut stack: Vec<(&N, &N)> = edges[start].iter().map(|n| (n, start)).collect();
        while let Some((next, from)) = stack.pop() {
            if next == start {
                let mut path = vec![name(start)];
                let mut at = from;
                while at != start {
                    path.push(name(at));
                    at = came_from[at];
                }
                path.push(name(start));
                path.reverse();
                circles.push(path.join(" -> "));
                break;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, from);
                stack.extend(edges.get(next).into_iter().flatten().map(|n| (n, next)));
            }
        }
    }
    circles
}

#[test]
fn no_file_in_src_imports_a_file_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = import_edges(&src);
    // A circle exists iff some file reaches itself; each is shown by one path around it.
    let name = |f: &PathBuf| f.strip_prefix(&src).unwrap().display().to_string();
    let circles = circles_of(&edges, name);
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// A folder (or a file directly under `src/`) is one module of the layout's drawing:
/// every import between two of them runs downhill, so no two of them import each other
/// through any chain. `lib.rs` and `main.rs`, which declare and start everything, stand
/// above all and are left out.
#[test]
fn no_module_of_src_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let top = |f: &PathBuf| module_path(&src, f).first().cloned().unwrap_or_default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, targets) in import_edges(&src) {
        let from = top(&file);
        if from.is_empty() {
            continue;
        }
        let set = edges.entry(from.clone()).or_default();
        for to in targets.iter().map(top) {
            if !to.is_empty() && to != from {
                set.insert(to);
            }
        }
    }
    let circles = circles_of(&edges, |m| m.clone());
    assert!(
        circles.is_empty(),
        "modules importing each other:\n{}",
        circles.join("\n")
    );
}
