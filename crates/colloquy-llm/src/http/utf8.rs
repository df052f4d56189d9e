//! Lossy UTF-8 for a byte stream: an invalid sequence becomes U+FFFD instead of ending the
//! stream, so one bad byte from a server costs a character, not the turn. A sequence split
//! between two chunks is held back until the next one completes it.

/// The decoder's state: the start of a character the last chunk ended in.
#[derive(Debug, Default)]
pub(crate) struct LossyUtf8 {
    pending: Vec<u8>,
    /// Invalid sequences replaced so far.
    pub(crate) replaced: usize,
}

impl LossyUtf8 {
    /// The next chunk as valid UTF-8 bytes; an incomplete character at its end waits for the
    /// next chunk.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(input.len());
        let mut rest = input.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.extend_from_slice(valid.as_bytes());
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.extend_from_slice(valid);
                    match e.error_len() {
                        Some(bad) => {
                            self.replace(&mut out);
                            rest = &after[bad..];
                        }
                        // The chunk ends inside a character: the next chunk may complete it.
                        None => {
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// The end of the stream: a character left incomplete is replaced too.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !std::mem::take(&mut self.pending).is_empty() {
            self.replace(&mut out);
        }
        out
    }

    fn replace(&mut self, out: &mut Vec<u8>) {
        self.replaced += 1;
        out.extend_from_slice(char::REPLACEMENT_CHARACTER.encode_utf8(&mut [0; 4]).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> (String, usize) {
        let mut decoder = LossyUtf8::default();
        let mut out: Vec<u8> = chunks.iter().flat_map(|c| decoder.push(c)).collect();
        out.extend(decoder.finish());
        (String::from_utf8(out).expect("always valid"), decoder.replaced)
    }

    #[test]
    fn valid_text_passes_even_when_a_character_is_split() {
        let text = "café – 東京";
        let bytes = text.as_bytes();
        for at in 0..bytes.len() {
            assert_eq!(decode(&[&bytes[..at], &bytes[at..]]), (text.to_string(), 0), "{at}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(decode(&[b"caf\xff!"]), ("caf\u{FFFD}!".to_string(), 1));
        assert_eq!(decode(&[b"a\xc3", b"(b"]), ("a\u{FFFD}(b".to_string(), 1));
        assert_eq!(decode(&[b"\xed\xa0\x80x"]).0, "\u{FFFD}\u{FFFD}\u{FFFD}x");
        assert_eq!(decode(&[b"end\xe6\x9d"]), ("end\u{FFFD}".to_string(), 1));
    }
}
