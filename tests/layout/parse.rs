//! The reading half of the layout gate (`gate.rs`): a file's code without comments, literals and
//! tests, the paths of its use trees, its functions' lengths. Text in, values out: the parser's
//! self-test (agent/tests/layout.rs) checks it on known input; a new syntax the gate must read
//! (another prefix, another literal) goes here with a case in that test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The module path of a file: `drives/governor.rs` → [drives, governor]; `drives/mod.rs` →
/// [drives]; `lib.rs` and `main.rs` → [].
pub fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem);
    }
    parts
}

/// The code of a file with comments, string and char literals emptied (their newlines kept, so
/// line numbers hold): paths in docs and messages do not count, and braces in them do not
/// confuse the function lengths.
pub fn strip(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let newlines = |from: usize, to: usize, out: &mut String| {
        out.extend(s[from..to.min(s.len())].iter().filter(|c| **c == '\n'));
    };
    let mut i = 0;
    while i < s.len() {
        let next = s.get(i + 1).copied();
        if s[i] == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if s[i] == '/' && next == Some('*') {
            // Block comments nest.
            let (start, mut depth) = (i, 0usize);
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            newlines(start, i, &mut out);
        } else if s[i] == '"' {
            let start = i;
            i = string_end(&s, i);
            out.push_str("\"\"");
            newlines(start, i, &mut out);
        } else if s[i] == '\'' && (next == Some('\\') || s.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{7f}'); a lifetime ('a) never closes with a quote.
            let start = i;
            i += 2;
            while i < s.len() && s[i] != '\'' && i - start < 12 {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
            newlines(start, i, &mut out);
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// The index after the string literal whose quote is at `i`: a raw string (`r"…"`, `r#"…"#`,
/// `br"…"`) has no escapes, a normal one may.
fn string_end(s: &[char], mut i: usize) -> usize {
    let mut j = i;
    let mut hashes = 0;
    while j > 0 && s[j - 1] == '#' {
        hashes += 1;
        j -= 1;
    }
    let raw = j > 0 && s[j - 1] == 'r' && (j < 2 || !is_ident(s[j - 2]) || s[j - 2] == 'b');
    i += 1;
    if raw {
        while i < s.len() && !(s[i] == '"' && s[i + 1..].iter().take(hashes).filter(|c| **c == '#').count() == hashes) {
            i += 1;
        }
        i + 1 + hashes
    } else {
        while i < s.len() && s[i] != '"' {
            i += if s[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Blanks every `#[cfg(test)]` item of stripped code (a test module, a test-only import; newlines
/// kept) and returns the names of the child modules declared `#[cfg(test)] mod name;`, whose
/// files are test code.
pub fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut s: Vec<char> = code.chars().collect();
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut test_children = Vec::new();
    let mut i = 0;
    while i + attr.len() <= s.len() {
        if s[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        let start = i;
        i += attr.len();
        // Further attributes of the same item.
        loop {
            while i < s.len() && s[i].is_whitespace() {
                i += 1;
            }
            if s.get(i) != Some(&'#') {
                break;
            }
            let mut depth = 0;
            while i < s.len() {
                match s[i] {
                    '[' => depth += 1,
                    ']' => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        let item_start = i;
        // The item ends at its `;` or `,` (a field) before any block, or where its block closes.
        let (mut depth, mut parens, mut opened) = (0i64, 0i64, false);
        while i < s.len() {
            let c = s[i];
            i += 1;
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                '(' | '[' => parens += 1,
                ')' | ']' => parens -= 1,
                ';' | ',' if !opened && parens <= 0 => break,
                _ => {}
            }
            if depth < 0 || (opened && depth == 0) {
                break;
            }
        }
        let item: String = s[item_start..i].iter().collect();
        let words: Vec<&str> = item.split_whitespace().skip_while(|w| w.starts_with("pub")).collect();
        if !opened && words.first() == Some(&"mod") {
            if let Some(name) = words.get(1) {
                test_children.push(name.trim_end_matches(';').to_string());
            }
        }
        for c in &mut s[start..i] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    (s.into_iter().collect(), test_children)
}

/// The leaves of a use tree at `rest`, each with the name it is known by: `a::b::C` → ([a, b, C],
/// C); `{a::B as D, c::{self, E}}` → ([a, B], D), ([c], c), ([c, E], E); `a::*` → ([a], *).
pub fn parse_paths(rest: &str) -> Vec<(Vec<String>, String)> {
    fn skip_ws(s: &[char], i: &mut usize) {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    }
    fn ident(s: &[char], i: &mut usize) -> String {
        let start = *i;
        while *i < s.len() && is_ident(s[*i]) {
            *i += 1;
        }
        s[start..*i].iter().collect()
    }
    fn leaf(mut path: Vec<String>, alias: Option<String>, out: &mut Vec<(Vec<String>, String)>) {
        if path.last().is_some_and(|l| l == "self") {
            path.pop();
        }
        let name = alias.or_else(|| path.last().cloned()).unwrap_or_default();
        if !path.is_empty() {
            out.push((path, name));
        }
    }
    fn tree(s: &[char], i: &mut usize, mut cur: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
        loop {
            skip_ws(s, i);
            match s.get(*i) {
                Some('{') => {
                    *i += 1;
                    loop {
                        skip_ws(s, i);
                        if s.get(*i) == Some(&'}') {
                            *i += 1;
                            return;
                        }
                        tree(s, i, cur.clone(), out);
                        skip_ws(s, i);
                        match s.get(*i) {
                            Some(',') => *i += 1,
                            Some('}') => {
                                *i += 1;
                                return;
                            }
                            _ => return,
                        }
                    }
                }
                Some('*') => {
                    *i += 1;
                    return leaf(cur, Some("*".to_string()), out);
                }
                _ => {}
            }
            let word = ident(s, i);
            if word.is_empty() {
                return leaf(cur, None, out);
            }
            cur.push(word);
            if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
                *i += 2;
                continue;
            }
            let before_as = *i;
            skip_ws(s, i);
            if s[*i..].starts_with(&['a', 's']) && s.get(*i + 2).is_some_and(|c| c.is_whitespace()) {
                *i += 2;
                skip_ws(s, i);
                let alias = ident(s, i);
                return leaf(cur, Some(alias), out);
            }
            *i = before_as;
            return leaf(cur, None, out);
        }
    }
    let chars: Vec<char> = rest.chars().take(4000).collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, Vec::new(), &mut out);
    out
}

/// Every path the code names with `prefix` (e.g. `crate::`) at a word boundary.
pub fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        out.extend(parse_paths(&code[at + prefix.len()..]).into_iter().map(|(p, _)| p));
    }
    out
}

/// The `use` declarations of a file (any visibility: a private `use` is seen by the children
/// through `super::`): name → absolute module path, for paths inside the crate.
pub fn uses_of(code: &str, module: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        for (path, name) in parse_paths(&code[at + 4..]) {
            let Some(first) = path.first() else { continue };
            let absolute: Vec<String> = match first.as_str() {
                "crate" => path[1..].to_vec(),
                "self" => module.iter().chain(&path[1..]).cloned().collect(),
                "super" => {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    module[..module.len().saturating_sub(ups)].iter().chain(&path[ups..]).cloned().collect()
                }
                _ => {
                    let child: Vec<String> = module.iter().chain(std::iter::once(first)).cloned().collect();
                    if !modules.contains_key(&child) {
                        continue; // another crate or std
                    }
                    module.iter().chain(&path).cloned().collect()
                }
            };
            if name != "*" && name != "_" {
                out.insert(name, absolute);
            }
        }
    }
    out
}

/// Functions of `code` longer than `max` lines: (name, first line, lines).
pub fn long_functions(code: &str, max: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub") || ["async", "const", "unsafe", "extern"].contains(w));
        if words.next() != Some("fn") {
            continue;
        }
        let name: String = words.next().unwrap_or_default().chars().take_while(|c| is_ident(*c)).collect();
        let (mut depth, mut opened) = (0i64, false);
        for (j, l) in lines[i..].iter().enumerate() {
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            if !opened && l.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                if j + 1 > max {
                    out.push((name.clone(), i + 1, j + 1));
                }
                break;
            }
        }
    }
    out
}
