//! Tool names a model API accepts: `[A-Za-z0-9_-]{1,64}`.

/// The name the model sees for a server's tool `name`, with `prefix` (and `_`) before it if
/// set: characters outside `[A-Za-z0-9_-]` become `_`, and the whole is cut to 64 characters.
/// `None` when nothing usable is left.
///
/// ```
/// use colloquy_mcp::model_name;
/// assert_eq!(model_name(None, "get-sum").as_deref(), Some("get-sum"));
/// assert_eq!(model_name(Some("fs"), "read file").as_deref(), Some("fs_read_file"));
/// assert_eq!(model_name(None, "").as_deref(), None);
/// ```
pub fn model_name(prefix: Option<&str>, name: &str) -> Option<String> {
    let joined = match prefix {
        Some(prefix) if !prefix.is_empty() => format!("{prefix}_{name}"),
        _ => name.to_string(),
    };
    let clean: String = joined
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    (!clean.is_empty() && !name.is_empty()).then_some(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_model_apis() {
        let long = "x".repeat(100);
        assert_eq!(model_name(None, &long).unwrap().len(), 64);
        assert_eq!(model_name(Some("srv"), "a.b/c").as_deref(), Some("srv_a_b_c"));
        assert_eq!(model_name(Some(""), "echo").as_deref(), Some("echo"));
        assert_eq!(model_name(None, "é").as_deref(), Some("_"));
    }
}
