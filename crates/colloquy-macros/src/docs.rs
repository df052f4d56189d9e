//! What a doc comment says: the tool's description (the text before the parameter list) and
//! each parameter's (`* `name` - text` or `- name: text` lines).

use syn::{Attribute, Expr, Lit, Meta};

pub(crate) struct Docs {
    lines: Vec<String>,
}

impl Docs {
    pub(crate) fn of(attrs: &[Attribute]) -> Self {
        let lines = attrs
            .iter()
            .filter_map(|attr| match &attr.meta {
                Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                    Expr::Lit(lit) => match &lit.lit {
                        Lit::Str(s) => Some(s.value().trim().to_string()),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            })
            .collect();
        Docs { lines }
    }

    /// The text before the first parameter line, paragraphs joined by a blank line.
    pub(crate) fn summary(&self) -> String {
        let text: Vec<&str> = self
            .lines
            .iter()
            .take_while(|l| param_line(l).is_none() && !l.starts_with('#'))
            .map(String::as_str)
            .collect();
        let mut out = String::new();
        for line in text {
            match (line.is_empty(), out.is_empty()) {
                (true, _) if !out.ends_with("\n\n") && !out.is_empty() => out.push_str("\n\n"),
                (true, _) => {}
                (false, true) => out.push_str(line),
                (false, false) if out.ends_with("\n\n") => out.push_str(line),
                (false, false) => {
                    out.push(' ');
                    out.push_str(line);
                }
            }
        }
        out.trim().to_string()
    }

    /// The description of parameter `name`, if the list has one.
    pub(crate) fn param(&self, name: &str) -> Option<String> {
        self.lines.iter().find_map(|line| match param_line(line) {
            Some((param, text)) if param == name => Some(text.to_string()),
            _ => None,
        })
    }
}

/// `* `name` - text`, `* name - text`, `- name: text` → (name, text).
fn param_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("* ").or_else(|| line.strip_prefix("- "))?;
    let (name, text) = rest.split_once(" - ").or_else(|| rest.split_once(": "))?;
    let name = name.trim().trim_matches('`');
    let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    valid.then(|| (name, text.trim()))
}
