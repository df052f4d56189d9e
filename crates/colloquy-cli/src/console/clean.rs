//! Text from a model, a tool or a server made safe to write to a terminal (pure).
//!
//! A terminal obeys what it is sent: an escape sequence can recolour, move the cursor, retitle
//! the window or rewrite what is on screen; a CR lets a line overwrite the one before; a bidi
//! override reorders what the reader sees. None of that text comes from the user, so none of
//! it reaches the terminal as a control: each control character is shown as a visible symbol
//! instead (C0 ones as their Unicode control pictures, `ESC` as `␛`; the others as `\u{..}`),
//! and the text around it is kept.

/// Agent text, streamed: newlines and tabs stay (the text is prose); CR is dropped (a CRLF is
/// a newline; a lone CR would overwrite the line); every other control is made visible.
///
/// ```
/// use colloquy_cli::console::clean::text;
/// assert_eq!(text("hi\r\n\x1b[2Jthere\t!"), "hi\n␛[2Jthere\t!");
/// ```
pub fn text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {}
            c => push_visible(&mut out, c),
        }
    }
    out
}

/// A field shown inside one line (a tool's name, arguments, update or output, an error
/// message, a history entry): as [`text`], but a newline becomes `↵` and a tab a space, so a
/// field can never start a line that looks like the chat's own.
///
/// ```
/// use colloquy_cli::console::clean::line;
/// assert_eq!(line("done\nagent › fake\x07"), "done↵agent › fake␇");
/// ```
pub fn line(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => out.push('↵'),
            '\t' => out.push(' '),
            c => push_visible(&mut out, c),
        }
    }
    out
}

fn push_visible(out: &mut String, c: char) {
    match c as u32 {
        // C0 controls: their control pictures, U+2400 + code (␀ ␇ ␛ ␍ …).
        code @ 0..=0x1f => out.push(char::from_u32(0x2400 + code).unwrap_or('�')),
        0x7f => out.push('␡'),
        // C1 controls (CSI, OSC… in 8-bit form) and the bidi embeddings, overrides and
        // isolates that reorder what the reader sees.
        code @ (0x80..=0x9f | 0x202a..=0x202e | 0x2066..=0x2069) => {
            out.push_str(&format!("\\u{{{code:x}}}"));
        }
        _ => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_are_made_visible() {
        assert_eq!(text("\x1b]0;pwned\x07title"), "␛]0;pwned␇title");
        assert_eq!(text("a\0b\x08c\x7fd"), "a␀b␈c␡d");
        assert_eq!(text("8-bit CSI \u{9b}31m"), "8-bit CSI \\u{9b}31m");
        assert_eq!(text("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn agent_text_keeps_its_lines_and_drops_carriage_returns() {
        assert_eq!(text("one\r\ntwo\n\tthree"), "one\ntwo\n\tthree");
        assert_eq!(text("progress 10%\rprogress 99%"), "progress 10%progress 99%");
        assert_eq!(text("plain café ☕"), "plain café ☕");
    }

    #[test]
    fn a_field_stays_on_its_line() {
        assert_eq!(line("a\r\nb\nc\td"), "a↵b↵c d");
        assert_eq!(line("lone\rcr"), "lone␍cr");
        assert_eq!(line("{\"city\": \"Rome\"}"), "{\"city\": \"Rome\"}");
    }
}
