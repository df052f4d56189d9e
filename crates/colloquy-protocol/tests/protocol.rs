//! The protocol's own messages as a client writes and reads them; the protocol against a real
//! session is `colloquy-edge`'s test.

use colloquy_protocol::{Command, ErrorKind, EventFrame, PROTOCOL_VERSION, Reply, Request};

#[test]
fn requests_and_event_frames_round_trip() {
    let request = Request::new(Command::Reject { call_id: "c1".into(), reason: "no".into() });
    assert_eq!(request.v, PROTOCOL_VERSION);
    let json: serde_json::Value = serde_json::from_slice(&request.encode()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"v": 1, "type": "reject", "call_id": "c1", "reason": "no"})
    );
    assert_eq!(Request::decode(&request.encode()).unwrap(), request);
    assert_eq!(request.command.name(), "reject");

    assert_eq!(EventFrame::decode(b"{}").unwrap_err().kind, ErrorKind::BadReply);
    assert_eq!(Reply::decode(b"[]").unwrap_err().kind, ErrorKind::BadReply);
    assert_eq!(Reply::Ok.unexpected("history").kind, ErrorKind::BadReply);
}
