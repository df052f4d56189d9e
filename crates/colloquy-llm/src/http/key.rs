//! The API key: never printed, and removed from anything a server echoes.

use std::fmt;
use std::sync::Arc;

/// A secret API key: shown as `***` by `Debug`, and removed from anything a server echoes.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(Arc::from(key.into()))
    }

    /// The key itself, for a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        match self.0.len() {
            0 => text.to_string(),
            _ => text.replace(&*self.0, "[redacted]"),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// `url` without its `user:password@` part. A URL that does not parse loses everything
/// between `://` and the last `@` of its authority, so even a malformed one shows no secret.
pub(crate) fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() || !parsed.username().is_empty() => {
            let _ = parsed.set_password(None);
            let _ = parsed.set_username("");
            let mut text = parsed.to_string();
            // `Url` writes an empty path as `/`; the base URL as set has none.
            if text.ends_with('/') && !url.ends_with('/') {
                text.pop();
            }
            text
        }
        Ok(_) => url.to_string(),
        Err(_) => {
            let start = url.find("://").map_or(0, |i| i + 3);
            let end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
            match url[start..end].rfind('@') {
                Some(at) => format!("{}{}", &url[..start], &url[start + at + 1..]),
                None => url.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_show() {
        let key = ApiKey::new("sk-secret");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(key.redact("bad key sk-secret!"), "bad key [redacted]!");
    }
}
