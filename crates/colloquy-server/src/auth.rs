//! Who may use the API: a bearer token when the server has one, the `Host` a request names
//! when it has none, and a browser's `Origin` (docs/protocol.md#auth). The token is compared in
//! constant time and never written anywhere (logs, errors, `Debug`).

use std::net::{IpAddr, SocketAddr};

use axum::http::header::{AUTHORIZATION, HOST, ORIGIN, SEC_WEBSOCKET_PROTOCOL};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Uri};
use colloquy_protocol::{ErrorCode, ServerError};
use subtle::ConstantTimeEq;

use crate::BEARER_SUBPROTOCOL_PREFIX;

/// The server's secret; its `Debug` does not show it.
#[derive(Clone)]
pub(crate) struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    pub(crate) fn new(token: String) -> Self {
        Self(token)
    }

    /// Whether a browser can send it: not empty, and only the characters a WebSocket
    /// subprotocol may carry that need no quoting anywhere (`[A-Za-z0-9-._~]`).
    pub(crate) fn is_valid(&self) -> bool {
        !self.0.is_empty()
            && self.0.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    }

    /// Whether `offered` is the token. Only the lengths can be told apart by timing, which
    /// says nothing useful about a random token.
    fn matches(&self, offered: &str) -> bool {
        self.0.as_bytes().ct_eq(offered.as_bytes()).into()
    }
}

/// A web origin as browsers send it: `scheme://host[:port]`, lower case, without the
/// scheme's default port. Allowed origins and the requests' `Origin` headers are both read
/// into it, so `HTTPS://App.Example:443/` allows `https://app.example`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// Reads `text`, or says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        if text.trim() == "*" {
            return Err("`*` would let every web page drive the API: name each origin");
        }
        let uri: Uri = text.parse().map_err(|_| "not a URL")?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err("expected scheme://host[:port]");
        };
        if authority.as_str().contains('@') {
            return Err("an origin has no user name or password");
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err("an origin has no path or query");
        }
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        };
        let port = authority.port_u16().filter(|port| Some(*port) != default);
        Ok(Self { scheme, host: authority.host().to_ascii_lowercase(), port })
    }

    /// Its host (an IPv6 address in brackets).
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The port a request to it goes to.
    fn effective_port(&self) -> Option<u16> {
        self.port.or(match self.scheme.as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        })
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Whether a request's `Origin` value is one of `allowed`.
pub(crate) fn is_allowed(allowed: &[Origin], origin: &[u8]) -> bool {
    std::str::from_utf8(origin)
        .ok()
        .and_then(|origin| Origin::parse(origin).ok())
        .is_some_and(|origin| allowed.contains(&origin))
}

/// Checks the request's credentials: `Authorization: Bearer <token>`, or on a WebSocket
/// upgrade the subprotocol `colloquy.bearer.<token>`.
pub(crate) fn check_token(token: Option<&Token>, headers: &HeaderMap) -> Result<(), ServerError> {
    let Some(token) = token else { return Ok(()) };
    let bearer = headers
        .get_all(AUTHORIZATION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    let subprotocol = headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|protocol| protocol.trim().strip_prefix(BEARER_SUBPROTOCOL_PREFIX));
    // Every offer is compared, so the time taken does not say which one matched.
    let mut any = false;
    for offered in bearer.chain(subprotocol) {
        any |= token.matches(offered);
    }
    match any {
        true => Ok(()),
        false => Err(ServerError::new(
            ErrorCode::Unauthorized,
            "a bearer token is required: `Authorization: Bearer <token>`, or on a WebSocket the \
             subprotocol `colloquy.bearer.<token>` beside `colloquy.v1`",
        )),
    }
}

/// Without a token, checks that the request names the server by a loopback address,
/// `localhost`, the address it is bound to, or the host of an allowed origin (any port). A
/// page whose name an attacker re-points at 127.0.0.1 (DNS rebinding) is same-origin with
/// itself, so the `Origin` check passes it; its `Host` is still the attacker's name.
pub(crate) fn check_host(
    bound: SocketAddr,
    allowed_hosts: &[&str],
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<(), ServerError> {
    let named = headers.get(HOST).map(|host| host.to_str().ok());
    let authority = match named {
        Some(host) => host.and_then(|host| host.parse::<Authority>().ok()),
        // HTTP/1.0 may leave the header out; the request line may still carry it.
        None => uri.authority().cloned(),
    };
    let host = authority.as_ref().map(|authority| {
        let host = authority.host();
        host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
    });
    let allowed = host.is_some_and(|host| {
        let host = host.trim_end_matches('.');
        match host.parse::<IpAddr>() {
            Ok(ip) => ip.to_canonical().is_loopback() || ip == bound.ip(),
            Err(_) => {
                host.eq_ignore_ascii_case("localhost")
                    || allowed_hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(host))
            }
        }
    });
    match allowed {
        true => Ok(()),
        false => {
            let shown = match (named, &authority) {
                (_, Some(authority)) => format!("`{authority}`"),
                (Some(_), None) => "an unreadable host".to_owned(),
                (None, None) => "no host".to_owned(),
            };
            Err(ServerError::new(
                ErrorCode::ForbiddenHost,
                format!(
                    "the request names {shown}: a server without a token answers only to a \
                     loopback address or `localhost` (serve --allow-origin adds an origin's \
                     host; --token-env sets a token)"
                ),
            ))
        }
    }
}

/// Checks a browser's `Origin`: absent (not a browser), the server's own (same host and port
/// as the `Host` it was asked under), or one of `allowed`.
pub(crate) fn check_origin(allowed: &[Origin], headers: &HeaderMap) -> Result<(), ServerError> {
    let Some(origin) = headers.get(ORIGIN) else { return Ok(()) };
    let refused = || {
        let shown = origin.to_str().unwrap_or("(not text)");
        ServerError::new(
            ErrorCode::ForbiddenOrigin,
            format!("origin `{shown}` is not allowed (serve --allow-origin adds one)"),
        )
    };
    let origin = origin.to_str().ok().and_then(|o| Origin::parse(o).ok()).ok_or_else(refused)?;
    if allowed.contains(&origin) {
        return Ok(());
    }
    let own = headers
        .get(HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<Authority>().ok());
    let same = own.is_some_and(|own| {
        matches!(origin.scheme.as_str(), "http" | "https")
            && own.host().eq_ignore_ascii_case(&origin.host)
            && own.port_u16().or(origin.effective_port()) == origin.effective_port()
    });
    if same { Ok(()) } else { Err(refused()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(axum::http::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn takes_the_token_from_the_header_or_the_subprotocol() {
        let token = Token::new("s3cret".into());
        let t = Some(&token);
        assert!(check_token(None, &HeaderMap::new()).is_ok());
        assert!(check_token(t, &headers(&[(AUTHORIZATION, "Bearer s3cret")])).is_ok());
        assert!(check_token(t, &headers(&[(AUTHORIZATION, "bearer s3cret")])).is_ok());
        let both = "colloquy.v1, colloquy.bearer.s3cret";
        assert!(check_token(t, &headers(&[(SEC_WEBSOCKET_PROTOCOL, both)])).is_ok());
        for wrong in ["Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret", ""] {
            let error = check_token(t, &headers(&[(AUTHORIZATION, wrong)])).unwrap_err();
            assert_eq!(error.code, ErrorCode::Unauthorized);
            assert!(!error.message.contains("s3cret"));
        }
        assert!(check_token(t, &HeaderMap::new()).is_err());
        assert_eq!(format!("{token:?}"), "Token(…)");
        assert!(token.is_valid());
        assert!(Token::new("A-z_0.9~".into()).is_valid());
        for bad in ["", "with space", "comma,", "é", "a/b", "a+b="] {
            assert!(!Token::new(bad.into()).is_valid(), "{bad}");
        }
    }

    #[test]
    fn without_a_token_answers_only_to_loopback_names_and_allowed_hosts() {
        let bound: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let allowed = vec!["app.example"];
        let check = |host: &str| {
            check_host(bound, &allowed, &headers(&[(HOST, host)]), &Uri::from_static("/"))
        };
        for good in [
            "127.0.0.1:8080",
            "127.0.0.2",
            "localhost:9",
            "LocalHost",
            "localhost.:8080",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
            "app.example:8080",
            "APP.example",
        ] {
            assert!(check(good).is_ok(), "{good}");
        }
        for bad in ["evil.example:8080", "192.168.1.2:8080", "localhost.evil.example", "", "a b"] {
            assert_eq!(check(bad).unwrap_err().code, ErrorCode::ForbiddenHost, "{bad}");
        }
        let none = check_host(bound, &allowed, &HeaderMap::new(), &Uri::from_static("/"));
        assert_eq!(none.unwrap_err().code, ErrorCode::ForbiddenHost);
        let absolute = Uri::from_static("http://localhost:8080/v1/agents");
        assert!(check_host(bound, &allowed, &HeaderMap::new(), &absolute).is_ok());
    }

    #[test]
    fn reads_origins_as_browsers_send_them() {
        let read = |text: &str| Origin::parse(text).map(|o| o.to_string());
        assert_eq!(read("https://app.example").unwrap(), "https://app.example");
        assert_eq!(read("HTTP://Localhost:8080/").unwrap(), "http://localhost:8080");
        assert_eq!(read("http://[::1]:80").unwrap(), "http://[::1]");
        assert_eq!(read("https://app.example:8443").unwrap(), "https://app.example:8443");
        for bad in [
            "*",
            " * ",
            "app.example",
            "null",
            "",
            "https://u:p@app.example",
            "https://a/b",
            "https://a/?q",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lets_in_no_origin_its_own_and_the_allowed_ones() {
        let allowed = vec![Origin::parse("HTTPS://App.Example:443/").unwrap()];
        assert_eq!(allowed[0].to_string(), "https://app.example");
        assert!(check_origin(&allowed, &HeaderMap::new()).is_ok());
        let plain = headers(&[(HOST, "localhost"), (ORIGIN, "http://LOCALHOST:80")]);
        assert!(check_origin(&allowed, &plain).is_ok());
        let own = headers(&[(HOST, "127.0.0.1:8080"), (ORIGIN, "http://127.0.0.1:8080")]);
        assert!(check_origin(&allowed, &own).is_ok());
        let listed = headers(&[(HOST, "127.0.0.1:8080"), (ORIGIN, "https://app.example")]);
        assert!(check_origin(&allowed, &listed).is_ok());
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:8081",
            "null",
            "file://x",
            "https://app.example.evil",
        ] {
            let h = headers(&[(HOST, "127.0.0.1:8080"), (ORIGIN, bad)]);
            assert_eq!(check_origin(&allowed, &h).unwrap_err().code, ErrorCode::ForbiddenOrigin);
        }
    }
}
