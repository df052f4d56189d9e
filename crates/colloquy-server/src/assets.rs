//! The playground page's files (`assets/`), embedded at build time by `build.rs`, and the
//! content type of each by its extension.

/// Every file of `assets/`, by name, in name order.
const FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The file named `name` and its content type.
pub(crate) fn get(name: &str) -> Option<(&'static [u8], &'static str)> {
    let (_, bytes) = FILES.iter().find(|(file, _)| *file == name)?;
    Some((bytes, content_type(name)))
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_page_with_its_type() {
        let (page, kind) = get("index.html").expect("assets/index.html is embedded");
        assert!(!page.is_empty());
        assert_eq!(kind, "text/html; charset=utf-8");
        assert_eq!(content_type("app.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("style.css"), "text/css; charset=utf-8");
        assert!(get("../Cargo.toml").is_none());
    }
}
