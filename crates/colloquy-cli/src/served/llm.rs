//! The model `colloquy chat` (and `colloquy node`) talks to, from its options and the
//! environment.

use std::sync::Arc;

use colloquy::anthropic::Anthropic;
use colloquy::chat::ChatItem;
use colloquy::llm::http::HttpProvider;
use colloquy::llm::{Llm, LlmRequest, RequestKind, ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy::openai::OpenAi;

use crate::{AgentArgs, Provider};

/// The model, or why there is none (a usage error: exit 2); and a line saying which it is.
pub fn choose(provider: Provider, args: &AgentArgs) -> Result<(Arc<dyn Llm>, String), String> {
    match provider {
        Provider::Openai => configure(args, "openai", OpenAi::temperature),
        Provider::Anthropic => configure(args, "anthropic", Anthropic::temperature),
        Provider::Scripted => {
            let llm = ScriptedLlm::new([]).with_fallback(|_, request| scripted(request));
            Ok((Arc::new(llm), "the scripted model (no network)".into()))
        }
    }
}

/// A provider from its variables, with `--base-url`, `--model` and `--temperature` on top; a
/// base URL alone is enough (a local server may need no key).
fn configure<P: HttpProvider>(
    args: &AgentArgs,
    name: &str,
    temperature: fn(P, f32) -> P,
) -> Result<(Arc<dyn Llm>, String), String> {
    let mut llm = match (P::configured_from_env(), &args.base_url) {
        (Ok(llm), _) => llm,
        (Err(_), Some(_)) => P::with_defaults(),
        (Err(e), None) => {
            return Err(format!(
                "{e}\n(or pass --base-url, or try `colloquy chat --provider scripted`, which needs no key)"
            ));
        }
    };
    let endpoint = llm.endpoint_mut();
    if let Some(url) = &args.base_url {
        endpoint.set_base_url(url.as_str());
    }
    if let Some(model) = &args.model {
        endpoint.set_model(model.as_str());
    }
    let about = format!("{name} {} at {}", endpoint.model(), shown_url(endpoint.base_url()));
    if let Some(t) = args.temperature {
        llm = temperature(llm, t);
    }
    Ok((Arc::new(llm), about))
}

/// A base URL as the banner shows it: without a `user:key@` part or a query string (either
/// may hold a key) and without a fragment; a URL that does not parse is not shown at all.
///
/// ```
/// use colloquy_cli::served::llm::shown_url;
/// assert_eq!(shown_url("http://me:sk-1@127.0.0.1:8000/v1?key=sk-1"), "http://127.0.0.1:8000/v1");
/// ```
pub fn shown_url(base_url: &str) -> String {
    match url::Url::parse(base_url) {
        Ok(mut url) => {
            // Both fail only for URLs that cannot have credentials (`mailto:`): nothing to hide.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string().trim_end_matches('/').to_string()
        }
        Err(e) => format!("a base URL that is not a URL ({e})"),
    }
}

/// The scripted model's answer: it calls the weather tool when asked about the weather, the
/// booking tool when asked to book, ends the call on a goodbye, reads tool results back, and
/// otherwise says what it can do.
fn scripted(request: &LlmRequest) -> ScriptedResponse {
    match request.items.iter().last() {
        Some(ChatItem::Message(m)) if request.kind == RequestKind::UserTurn => {
            let said = m.text.to_lowercase();
            if said.contains("weather") {
                let city = city_in(&m.text).unwrap_or("Paris");
                let args = serde_json::json!({ "city": city }).to_string();
                ScriptedResponse::text(format!("Let me check the weather in {city}.")).with_call(
                    ScriptedCall::new(
                        format!("call_w{}", request.items.len()),
                        "get_weather",
                        args,
                    ),
                )
            } else if said.contains("book") {
                // The same trip again is refused while it runs and remembered once booked.
                let to = word_after(&m.text, " to ").unwrap_or("Paris");
                let args = serde_json::json!({ "origin": "London", "destination": to, "date": "Saturday" });
                ScriptedResponse::text(format!("Booking a flight from London to {to} on Saturday."))
                    .with_call(ScriptedCall::new(
                        format!("call_b{}", request.items.len()),
                        "book_flight",
                        args.to_string(),
                    ))
            } else if said.contains("bye") {
                ScriptedResponse::calls([ScriptedCall::new("call_end", "end_call", "{}")])
            } else {
                ScriptedResponse::text(format!(
                    "You said \"{}\". I am the scripted model: ask me about the weather, to book a flight, or say bye.",
                    m.text
                ))
            }
        }
        Some(ChatItem::FunctionCallOutput(o)) if o.name == "end_call" => {
            ScriptedResponse::text("Goodbye!")
        }
        // An update's output is wrapped in instructions: its first line is the news.
        Some(ChatItem::FunctionCallOutput(o)) => ScriptedResponse::text(format!(
            "Here is what I have: {}",
            o.output.lines().next().unwrap_or_default()
        )),
        _ => ScriptedResponse::text("How can I help?"),
    }
}

/// The word after " in " (`weather in Rome?` → `Rome`).
fn city_in(text: &str) -> Option<&str> {
    word_after(text, " in ")
}

/// The word after `mark` (` to ` in `book a flight to Rome` → `Rome`).
fn word_after<'a>(text: &'a str, mark: &str) -> Option<&'a str> {
    let at = text.find(mark)? + mark.len();
    let word = text[at..].split(|c: char| !c.is_alphanumeric() && c != '-').next()?;
    (!word.is_empty()).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_url_has_no_credentials() {
        assert_eq!(
            shown_url("https://user:secret@api.example.com/v1"),
            "https://api.example.com/v1"
        );
        assert_eq!(shown_url("https://token@api.example.com/v1/"), "https://api.example.com/v1");
        assert_eq!(
            shown_url("http://127.0.0.1:8000/v1?api-version=1&api-key=secret#x"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(shown_url("http://127.0.0.1:8000/v1"), "http://127.0.0.1:8000/v1");
        let bad = shown_url("not a url secret");
        assert!(!bad.contains("secret"), "{bad}");
    }

    #[test]
    fn finds_the_city() {
        assert_eq!(city_in("weather in Rome?"), Some("Rome"));
        assert_eq!(city_in("weather"), None);
        assert_eq!(word_after("book a flight to Oslo, please", " to "), Some("Oslo"));
    }
}
