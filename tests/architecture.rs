//! Invariants of the codebase that no compiler checks, checked here as
//! rust-analyzer's `tidy.rs` checks its own: reading the files as text.
//!
//! - Every file a comment or a page cites by path exists: a path from the
//!   repository's root (`src/…`, `tests/…`, `docs/…`, `deploy/…`,
//!   `bench/…`, `migrations/…`), or in the code one relative to `src/` or
//!   to the citing file's folder.
//! - Every section cited by a page's name, a comma and the section's
//!   title in quotes (the README, BENCHMARKS.md or a page under docs/) is
//!   a heading of that page.
//! - Only `src/delivery/` calls a route's upstream (`route.upstream.send`):
//!   every entrance reaches the consumer through the one engine.
//! - No module of `src/` names, however far round, a module that names it.
//! - The README is a door, at most 250 lines, and the one route it shows
//!   is a valid config.
//! - The library shows at most ten modules, each named where `lib.rs`
//!   says what it shows: the binary (`src/bin/hookgate/`), the tests and
//!   the benchmarks are built on those.
//! - Every link between pages lands on a file, and on a heading of it.
//! - No function of `src/` is over 120 lines.
//! - At most ten `sleep(` in `tests/it` outside its support and the fault
//!   and fleet tests: the rest wait on the gateway.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The folders a cited path may start from.
const ROOTED: [&str; 7] = [
    "src",
    "tests",
    "docs",
    "deploy",
    "bench",
    "migrations",
    ".ci",
];

/// The kinds of file a citation names.
const CITED: [&str; 11] = [
    ".rs", ".md", ".toml", ".sh", ".yml", ".yaml", ".json", ".lua", ".sql", ".service", ".example",
];

/// Every file that cites: the code, the tests, the pages, the deploy and
/// bench scripts.
fn citing() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for folder in ["src", "tests", "docs", "deploy", "bench"] {
        walk(&Path::new(ROOT).join(folder), &mut files);
    }
    for file in [
        "README.md",
        "BENCHMARKS.md",
        "gateway.toml.example",
        "Dockerfile",
    ] {
        files.push(Path::new(ROOT).join(file));
    }
    files.retain(|file| {
        let name = file.to_string_lossy();
        // Installed SDKs and built releases are not the project's.
        !name.contains("node_modules") && !name.contains("/tests/previous/src")
    });
    files
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(ROOT)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// The path-like words of `text` that name a file (`a/b.rs`), each with
/// the character before it.
fn cited_paths(text: &str) -> Vec<(char, &str)> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut found = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (is_path_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(from)) => {
                let word = text[from..i].trim_end_matches('.');
                let before = text[..from].chars().next_back().unwrap_or(' ');
                if word.contains('/') && CITED.iter().any(|ext| word.ends_with(ext)) {
                    found.push((before, word));
                }
                start = None;
            }
            _ => {}
        }
    }
    found
}

#[test]
fn every_cited_file_exists() {
    let mut missing = BTreeSet::new();
    for file in citing() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let in_code = relative(&file).starts_with("src/");
        for (before, path) in cited_paths(&text) {
            // Shell and format placeholders ($WORK/x.toml, {dir}/x.toml),
            // absolute and dot paths, and URLs name no file of the project.
            if "${}:".contains(before) || path.starts_with('/') || path.starts_with('.') {
                continue;
            }
            let first = path.split('/').next().unwrap_or_default();
            let candidates: Vec<PathBuf> = if ROOTED.contains(&first) {
                vec![Path::new(ROOT).join(path)]
            } else if in_code {
                vec![
                    Path::new(ROOT).join("src").join(path),
                    file.parent().unwrap().join(path),
                ]
            } else {
                continue;
            };
            if !candidates.iter().any(|candidate| candidate.exists()) {
                missing.insert(format!("{}: {path}", relative(&file)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited files that do not exist:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// A heading or a cited section as compared: no backticks, lower case.
fn normal(section: &str) -> String {
    section.replace('`', "").trim().to_lowercase()
}

fn headings(page: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(page)).unwrap();
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.insert(normal(line.trim_start_matches('#')));
        }
    }
    found
}

/// `text` with the comment markers at the start of each line dropped and
/// its lines joined, so a citation broken over two lines reads whole.
fn joined(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.trim_start();
            ["//!", "///", "//", "# ", "#"]
                .iter()
                .find_map(|marker| line.strip_prefix(marker))
                .unwrap_or(line)
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sections `text` cites: (page, section), from the page's name, a
/// comma, and the section's title in double quotes.
fn cited_sections(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let pages = ["README.md", "README", "BENCHMARKS.md", "docs/"];
    for page in pages {
        let mut rest = text;
        while let Some(at) = rest.find(page) {
            let after = &rest[at..];
            rest = &rest[at + page.len()..];
            let name_end = after.find(',').unwrap_or(0);
            let name = &after[..name_end];
            let page_name = match name {
                "README" | "README.md" => "README.md".to_owned(),
                "BENCHMARKS.md" => name.to_owned(),
                docs if docs.starts_with("docs/")
                    && docs.ends_with(".md")
                    && !docs.contains(char::is_whitespace) =>
                {
                    docs.to_owned()
                }
                _ => continue,
            };
            let Some(quoted) = after[name_end + 1..].trim_start().strip_prefix('"') else {
                continue;
            };
            let Some(end) = quoted.find('"') else {
                continue;
            };
            found.push((page_name, quoted[..end].to_owned()));
        }
    }
    found
}

#[test]
fn every_cited_section_exists() {
    let mut missing = BTreeSet::new();
    for file in citing() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (page, section) in cited_sections(&joined(&text)) {
            if !Path::new(ROOT).join(&page).exists() {
                missing.insert(format!("{}: {page} does not exist", relative(&file)));
            } else if !headings(&page).contains(&normal(&section)) {
                missing.insert(format!("{}: {page}, \"{section}\"", relative(&file)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited sections that are no heading of their page:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn only_delivery_calls_a_routes_upstream() {
    let mut files = Vec::new();
    walk(&Path::new(ROOT).join("src"), &mut files);
    let callers: Vec<String> = files
        .iter()
        .filter(|file| {
            // Whitespace dropped: rustfmt may break the call across lines.
            std::fs::read_to_string(file).is_ok_and(|text| {
                let code: String = text.split_whitespace().collect();
                code.contains("upstream.send(")
            })
        })
        .map(|file| relative(file))
        .collect();
    assert!(!callers.is_empty(), "the upstream is called somewhere");
    for caller in &callers {
        assert!(
            caller.starts_with("src/delivery/"),
            "{caller} calls a route's upstream; only src/delivery/ may (docs/architecture.md)"
        );
    }
}

/// The top-level modules of `src/` (a file, or a folder) and, for each,
/// the others its code names as `crate::NAME` (comments aside).
fn module_graph() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    walk(&Path::new(ROOT).join("src"), &mut files);
    let mut graph: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for file in files
        .iter()
        .filter(|file| file.extension().is_some_and(|e| e == "rs"))
    {
        let path = relative(file);
        let module = path["src/".len()..]
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" || module == "bin" {
            continue; // the crate's root and the binary assemble everything
        }
        let uses = graph.entry(module.clone()).or_default();
        let text = std::fs::read_to_string(file).unwrap();
        for line in text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
        {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    uses.insert(name);
                }
            }
        }
    }
    graph
}

/// No two modules of `src/` need each other, however far round: each can
/// be read (and changed) knowing only those below it.
#[test]
fn no_module_imports_a_module_that_imports_it() {
    let graph = module_graph();
    assert!(graph.len() > 20, "{graph:?}");
    // Depth-first, with the path walked so far: a module met again on it
    // closes a cycle.
    fn visit(
        module: &str,
        graph: &std::collections::BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|seen| seen == module) {
            panic!("an import cycle: {} -> {module}", path[at..].join(" -> "));
        }
        if !done.insert(module.to_owned()) {
            return;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
}

/// The admin API and the console read and act through the operator's door
/// (`ops::Operator`), never on the store themselves: what an operator
/// sees is what the door's rules let through.
#[test]
fn the_admin_reads_through_the_operators_door() {
    let mut files = Vec::new();
    walk(&Path::new(ROOT).join("src/admin"), &mut files);
    files.push(Path::new(ROOT).join("src/console.rs"));
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"));
        for line in code {
            assert!(
                !line.contains("parts.store") && !line.contains(".store."),
                "{} reads the store itself: {line}",
                relative(&file)
            );
        }
    }
}

/// The library's surface is small: at most ten public modules, named in
/// `src/lib.rs`'s "What the library shows".
#[test]
fn the_library_shows_at_most_ten_modules() {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let public: Vec<&str> = (lib.lines())
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';'))
        .collect();
    assert!(public.len() <= 10, "{public:?}");
    let shown = &lib[lib.find("# What the library shows").expect("the section")..];
    for module in &public {
        assert!(
            shown.contains(&format!("[`{module}`]")),
            "{module} is public and not named"
        );
    }
}

/// The README is a door into the docs, not the manual: at most 250 lines,
/// and the config it shows is one `hookgate check` accepts.
#[test]
fn the_readme_is_a_door_and_its_route_is_valid() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "the README has {lines} lines; move a feature's detail to docs/guide/"
    );
    let route = &readme[readme
        .find("## One route")
        .expect("the README shows one route")..];
    let toml = route
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block");
    let env = |name: &str| {
        (name == "STRIPE_WEBHOOK_SECRET").then(|| "whsec_0123456789abcdef0123456789".to_owned())
    };
    let parsed = hookgate::config::Config::parse(toml, Path::new("README.md"), &env);
    assert!(
        parsed.is_ok(),
        "{:?}",
        parsed.err().map(|error| error.to_string())
    );
}

/// Tests wait on what the gateway says — its counters, its answers, a
/// record's state — or move its clock, rather than sleep and hope. A
/// `sleep(` is left where the time between two things is itself what is
/// tested (bytes split across writes, a lease left to lapse), and in the
/// tests whose subject is a fault or a fleet (a process killed, a node or
/// a primary lost), which wait out real failover times.
#[test]
fn tests_wait_on_the_gateway_not_on_the_clock() {
    const FAULTS_AND_FLEETS: [&str; 6] = [
        "fault_run.rs",
        "faults.rs",
        "sentinel.rs",
        "cluster_spread.rs",
        "ordering_crashes.rs",
        "fleet.rs",
    ];
    let mut files = Vec::new();
    walk(&Path::new(ROOT).join("tests/it"), &mut files);
    let mut sleeping = Vec::new();
    for file in files {
        let name = relative(&file);
        let exempt = name.starts_with("tests/it/support/")
            || FAULTS_AND_FLEETS
                .iter()
                .any(|f| name.ends_with(&format!("/{f}")));
        if exempt || !name.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = (text.lines()).filter(|line| !line.trim_start().starts_with("//"));
        for line in code.filter(|line| line.contains("sleep(")) {
            sleeping.push(format!("{name}: {}", line.trim()));
        }
    }
    assert!(
        sleeping.len() <= 10,
        "{} sleeps outside support, fault and fleet tests:\n{}",
        sleeping.len(),
        sleeping.join("\n")
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as dashes.
fn anchor(heading: &str) -> String {
    (heading.trim().to_lowercase().chars())
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every link of a page to another file of the repository (`[text](path)`,
/// relative to the page) names a file that exists, and its `#anchor`, if
/// any, a heading of that file.
#[test]
fn every_link_between_pages_lands() {
    let mut pages = vec![
        Path::new(ROOT).join("README.md"),
        Path::new(ROOT).join("BENCHMARKS.md"),
    ];
    walk(&Path::new(ROOT).join("docs"), &mut pages);
    let mut broken = Vec::new();
    for page in pages
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = match path {
                "" => page.clone(),
                _ => page.parent().unwrap().join(path),
            };
            if !file.exists() {
                broken.push(format!("{}: {target}", relative(page)));
                continue;
            }
            if fragment.is_empty() || file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&file).unwrap();
            let mut fenced = false;
            let anchors: BTreeSet<String> = (target_text.lines())
                .filter(|line| {
                    fenced ^= line.starts_with("```");
                    !fenced && line.starts_with('#')
                })
                .map(|line| anchor(line.trim_start_matches('#')))
                .collect();
            if !anchors.contains(fragment) {
                broken.push(format!("{}: {target} (no such heading)", relative(page)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that land nowhere:\n{}",
        broken.join("\n")
    );
}

/// Every function of `src/` outside its tests, with its length in lines
/// from its signature to its closing brace, as rustfmt lays it out (the
/// brace at the signature's indentation).
fn function_lengths() -> Vec<(usize, String)> {
    let mut files = Vec::new();
    walk(&Path::new(ROOT).join("src"), &mut files);
    let mut lengths = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let name = relative(file);
        if name.ends_with("tests.rs") || name.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break; // a file's tests come last
            }
            let code = line.trim_start();
            let indent = &line[..line.len() - code.len()];
            let words: Vec<&str> = code.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| *w == "fn") else {
                continue;
            };
            let qualifiers = [
                "pub",
                "pub(crate)",
                "pub(super)",
                "async",
                "const",
                "unsafe",
            ];
            if at + 1 >= words.len() || !words[..at].iter().all(|w| qualifiers.contains(w)) {
                continue;
            }
            // A declaration without a body ends in `;` before any `{`.
            let opens = lines[i..].iter().position(|l| {
                let l = l.trim_end();
                l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
            });
            let Some(opens) = opens else { continue };
            if !lines[i + opens].trim_end().ends_with('{') {
                continue;
            }
            let closing = format!("{indent}}}");
            if let Some(end) = lines[i..].iter().position(|l| *l == closing) {
                let fn_name = words[at + 1].split(['(', '<']).next().unwrap_or_default();
                lengths.push((end + 1, format!("{name}: {fn_name}")));
            }
        }
    }
    lengths
}

/// Functions fit on a screen: none in `src/` is over 120 lines.
#[test]
fn no_function_is_over_120_lines() {
    let lengths = function_lengths();
    assert!(lengths.len() > 1000, "{} functions found", lengths.len());
    let long: Vec<String> = (lengths.iter())
        .filter(|(lines, _)| *lines > 120)
        .map(|(lines, name)| format!("{name}: {lines} lines"))
        .collect();
    assert!(long.is_empty(), "split them:\n{}", long.join("\n"));
}
