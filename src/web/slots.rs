//! The open connections, and who makes room for a new one. Every connection serves one
//! request (there is no keep-alive), so a connection is either still waiting for its
//! request head, or busy (its request is being read or answered).
//!
//! A new connection is let in when its client holds fewer than the per-client cap and the
//! server fewer than the total cap. Otherwise the oldest connection still waiting for its
//! request head makes room (the client's own oldest when the client is at its cap): it is
//! shut down, and its thread ends at once. Only when every connection in the way is busy is
//! the new one answered 503. So sockets that send nothing, or a head byte by byte, never
//! lock out a client that sends its request, from another address or from the same one.

use std::collections::BTreeMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::Arc;

use super::peer;

/// Connection ids: they grow with each connection, so the smallest is the oldest.
pub(crate) type SlotId = u64;

struct Entry {
    stream: Arc<TcpStream>,
    /// The client's group (see `peer`): an IPv4 address, or an IPv6 /64.
    client: IpAddr,
    /// Still waiting for its request head: may make room for a new connection.
    waiting: bool,
}

/// The open connections.
#[derive(Default)]
pub(crate) struct Slots {
    next_id: SlotId,
    open: BTreeMap<SlotId, Entry>,
}

/// Why [`Slots::admit`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The client holds its cap of connections, all busy.
    Client,
    /// The server holds its cap of connections, all busy.
    Server,
}

impl Slots {
    /// Takes a place for `stream` from `peer`, making room as the module docs say; the
    /// connections shut down to make room are left to their threads, which see the
    /// shutdown and end.
    pub(crate) fn admit(
        &mut self,
        stream: Arc<TcpStream>,
        peer: IpAddr,
        per_client: usize,
        total: usize,
    ) -> Result<SlotId, Full> {
        let client = peer::group(peer, 32);
        if self.open.values().filter(|e| e.client == client).count() >= per_client {
            self.evict_oldest_waiting(Some(client))
                .ok_or(Full::Client)?;
        }
        if self.open.len() >= total {
            self.evict_oldest_waiting(None).ok_or(Full::Server)?;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(
            id,
            Entry {
                stream,
                client,
                waiting: true,
            },
        );
        Ok(id)
    }

    /// Shuts down the oldest connection still waiting for its request (of `client` only,
    /// when given) and forgets it; `None` when there is none.
    fn evict_oldest_waiting(&mut self, client: Option<IpAddr>) -> Option<()> {
        let id = self
            .open
            .iter()
            .find(|(_, e)| e.waiting && client.is_none_or(|c| e.client == c))
            .map(|(id, _)| *id)?;
        let entry = self.open.remove(&id)?;
        log::debug!("litejobs web: closing a connection that sent no request, to make room");
        let _ = entry.stream.shutdown(Shutdown::Both);
        Some(())
    }

    /// The connection `id` has its request head: it is busy from now on, never evicted.
    pub(crate) fn busy(&mut self, id: SlotId) {
        if let Some(entry) = self.open.get_mut(&id) {
            entry.waiting = false;
        }
    }

    /// Gives the place back (nothing when it was taken away to make room).
    pub(crate) fn remove(&mut self, id: SlotId) -> Option<Arc<TcpStream>> {
        self.open.remove(&id).map(|e| e.stream)
    }

    /// Open connections.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Ends reading on every open connection (a stop): waiting ones end, busy ones finish.
    pub(crate) fn shutdown_reads(&self) {
        for entry in self.open.values() {
            let _ = entry.stream.shutdown(Shutdown::Read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected socket pair's client side, for a slot to hold.
    fn socket(listener: &TcpListener) -> std::io::Result<(Arc<TcpStream>, TcpStream)> {
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, _) = listener.accept()?;
        Ok((Arc::new(server), client))
    }

    #[test]
    fn waiting_connections_make_room_oldest_first_and_busy_ones_never() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let mut slots = Slots::default();
        let mut clients = Vec::new();
        let mut admit = |slots: &mut Slots, peer: IpAddr| -> std::io::Result<_> {
            let (server, client) = socket(&listener)?;
            clients.push(client);
            Ok(slots.admit(server, peer, 2, 3))
        };
        let first = admit(&mut slots, a)?;
        let second = admit(&mut slots, a)?;
        assert_eq!((first, second), (Ok(0), Ok(1)));
        // A's third: its own oldest waiting one (0) makes room.
        assert_eq!(admit(&mut slots, a)?, Ok(2));
        assert!(slots.remove(0).is_none(), "0 was evicted");
        slots.busy(1);
        slots.busy(2);
        // A is at its cap with busy connections only.
        assert_eq!(admit(&mut slots, a)?, Err(Full::Client));
        // B fits under the total cap; B's next one finds the server full of busy
        // connections but its own waiting one.
        assert_eq!(admit(&mut slots, b)?, Ok(3));
        assert_eq!(slots.len(), 3);
        assert_eq!(admit(&mut slots, b)?, Ok(4));
        assert!(slots.remove(3).is_none(), "3 made room for 4");
        slots.busy(4);
        assert_eq!(admit(&mut slots, b)?, Err(Full::Server));
        Ok(())
    }
}
