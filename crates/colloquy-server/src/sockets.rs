//! The WebSockets open now, in all and by client address: a WebSocket holds a place here, not
//! among the HTTP connections, so sockets left open never keep a plain request (`/healthz`
//! included) waiting; and one client cannot take every place (docs/protocol.md#limits).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The open WebSockets, counted.
#[derive(Default)]
pub(crate) struct Sockets {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    /// Looked up, never iterated.
    by_peer: HashMap<IpAddr, usize>,
}

/// Why a WebSocket cannot open now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The client has its maximum open.
    Client,
    /// The server has its maximum open.
    Server,
}

impl Sockets {
    /// A place for one more WebSocket from `peer`, unless it has `per_client` open already or
    /// the server has `total`.
    pub(crate) fn open(
        self: &Arc<Self>,
        peer: IpAddr,
        per_client: usize,
        total: usize,
    ) -> Result<SocketPlace, Refused> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = counts.by_peer.get(&peer).copied().unwrap_or(0);
        if mine >= per_client {
            return Err(Refused::Client);
        }
        if counts.total >= total {
            return Err(Refused::Server);
        }
        counts.total += 1;
        counts.by_peer.insert(peer, mine + 1);
        Ok(SocketPlace { sockets: Arc::clone(self), peer })
    }
}

/// One open WebSocket's place, given back when it drops.
pub(crate) struct SocketPlace {
    sockets: Arc<Sockets>,
    peer: IpAddr,
}

impl Drop for SocketPlace {
    fn drop(&mut self) {
        let mut counts = self.sockets.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total = counts.total.saturating_sub(1);
        if let Some(mine) = counts.by_peer.get_mut(&self.peer) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                counts.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_client_and_the_whole_and_gives_places_back() {
        let sockets = Arc::new(Sockets::default());
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let first = sockets.open(a, 2, 3).unwrap();
        let _second = sockets.open(a, 2, 3).unwrap();
        assert_eq!(sockets.open(a, 2, 3).err(), Some(Refused::Client));
        let _third = sockets.open(b, 2, 3).unwrap();
        assert_eq!(sockets.open(b, 2, 3).err(), Some(Refused::Server));
        drop(first);
        assert!(sockets.open(a, 2, 3).is_ok());
        assert!(sockets.counts.lock().unwrap().by_peer.len() == 2);
    }
}
