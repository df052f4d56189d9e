//! The model `colloquy chat` talks to, from its options and the environment.

use std::sync::Arc;

use colloquy::http::HttpProvider;
use colloquy::{
    Anthropic, ChatItem, Llm, LlmRequest, OpenAi, RequestKind, ScriptedCall, ScriptedLlm,
    ScriptedResponse,
};

use crate::{ChatArgs, Provider};

/// The model, or why there is none (a usage error: exit 2); and a line saying which it is.
pub fn choose(args: &ChatArgs) -> Result<(Arc<dyn Llm>, String), String> {
    match args.provider {
        Provider::Openai => configure::<OpenAi>(args, "openai"),
        Provider::Anthropic => configure::<Anthropic>(args, "anthropic"),
        Provider::Scripted => {
            let llm = ScriptedLlm::new([]).with_fallback(|_, request| scripted(request));
            Ok((Arc::new(llm), "the scripted model (no network)".into()))
        }
    }
}

/// A provider from its variables, with `--base-url` and `--model` on top; a base URL alone
/// is enough (a local server may need no key).
fn configure<P: HttpProvider>(
    args: &ChatArgs,
    name: &str,
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
    let about = format!("{name} {} at {}", endpoint.model(), endpoint.base_url());
    Ok((Arc::new(llm), about))
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
                let args = r#"{"origin":"London","destination":"Paris","date":"Saturday"}"#;
                ScriptedResponse::text("Booking a flight from London to Paris on Saturday.")
                    .with_call(ScriptedCall::new(
                        format!("call_b{}", request.items.len()),
                        "book_flight",
                        args,
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
    let at = text.find(" in ")? + 4;
    let word = text[at..].split(|c: char| !c.is_alphanumeric() && c != '-').next()?;
    (!word.is_empty()).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_city() {
        assert_eq!(city_in("weather in Rome?"), Some("Rome"));
        assert_eq!(city_in("weather"), None);
    }
}
