//! The open connections, and who makes room for a new one. Every connection serves one
//! request (there is no keep-alive), so a connection is either idle, connected without
//! having sent a byte, or busy: its client has sent something (it waits in the socket, or
//! its thread has read it).
//!
//! A new connection is let in when its client holds fewer than the per-client cap and the
//! server fewer than the total cap. Otherwise the oldest idle connection makes room (the
//! client's own oldest when the client is at its cap): it is shut down, and its thread ends
//! at once. Only when every connection in the way is busy is the new one answered 503. So
//! sockets that send nothing never lock out a client that sends its request, from another
//! address or from the same one; and a request that was sent is never dropped to make room.

use std::collections::BTreeMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::peer;

/// Connection ids: they grow with each connection, so the smallest is the oldest.
pub(crate) type SlotId = u64;

struct Entry {
    stream: Arc<TcpStream>,
    /// The client's group (see `peer`): an IPv4 address, or an IPv6 /64.
    client: IpAddr,
    /// Set by the connection's thread once it has read a byte.
    received: Arc<AtomicBool>,
}

impl Entry {
    /// Connected without having sent a byte: nothing read by its thread, nothing waiting in
    /// the socket (the thread may not have run yet).
    fn idle(&self) -> bool {
        !self.received.load(Ordering::Acquire) && !bytes_waiting(&self.stream)
    }
}

/// True when the client has sent bytes not read yet. Peeks without blocking and without
/// changing the socket, which the connection's thread may be reading at the same moment.
#[cfg(unix)]
fn bytes_waiting(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    socket2::SockRef::from(stream)
        .recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        .is_ok_and(|n| n > 0)
}

/// Without a non-blocking peek, only what the connection's thread has read counts.
#[cfg(not(unix))]
fn bytes_waiting(_stream: &TcpStream) -> bool {
    false
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
    /// shutdown and end. Returns the place and the flag its thread sets on the first byte.
    pub(crate) fn admit(
        &mut self,
        stream: Arc<TcpStream>,
        peer: IpAddr,
        per_client: usize,
        total: usize,
    ) -> Result<(SlotId, Arc<AtomicBool>), Full> {
        let client = peer::group(peer, 32);
        if self.open.values().filter(|e| e.client == client).count() >= per_client {
            self.evict_oldest_idle(Some(client)).ok_or(Full::Client)?;
        }
        if self.open.len() >= total {
            self.evict_oldest_idle(None).ok_or(Full::Server)?;
        }
        let id = self.next_id;
        self.next_id += 1;
        let received = Arc::new(AtomicBool::new(false));
        self.open.insert(
            id,
            Entry {
                stream,
                client,
                received: received.clone(),
            },
        );
        Ok((id, received))
    }

    /// Shuts down the oldest idle connection (of `client` only, when given) and forgets it;
    /// `None` when there is none.
    fn evict_oldest_idle(&mut self, client: Option<IpAddr>) -> Option<()> {
        let id = self
            .open
            .iter()
            .find(|(_, e)| client.is_none_or(|c| e.client == c) && e.idle())
            .map(|(id, _)| *id)?;
        let entry = self.open.remove(&id)?;
        log::debug!("litejobs web: closing a connection that sent nothing, to make room");
        let _ = entry.stream.shutdown(Shutdown::Both);
        Some(())
    }

    /// Gives the place back (nothing when it was taken away to make room).
    pub(crate) fn remove(&mut self, id: SlotId) -> Option<Arc<TcpStream>> {
        self.open.remove(&id).map(|e| e.stream)
    }

    /// Open connections.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Ends reading on every open connection (a stop): idle ones end, busy ones finish.
    pub(crate) fn shutdown_reads(&self) {
        for entry in self.open.values() {
            let _ = entry.stream.shutdown(Shutdown::Read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A connected socket pair: the server side for a slot to hold, and the client side.
    fn socket(listener: &TcpListener) -> std::io::Result<(Arc<TcpStream>, TcpStream)> {
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, _) = listener.accept()?;
        Ok((Arc::new(server), client))
    }

    #[test]
    fn idle_connections_make_room_oldest_first_and_busy_ones_never() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let mut slots = Slots::default();
        let mut clients = Vec::new();
        let admit = |slots: &mut Slots, clients: &mut Vec<TcpStream>, peer: IpAddr| {
            let (server, client) = socket(&listener)?;
            clients.push(client);
            std::io::Result::Ok(slots.admit(server, peer, 2, 3).map(|(id, _)| id))
        };
        let first = admit(&mut slots, &mut clients, a)?;
        let second = admit(&mut slots, &mut clients, a)?;
        assert_eq!((first, second), (Ok(0), Ok(1)));
        // A's third: its own oldest idle one (0) makes room.
        assert_eq!(admit(&mut slots, &mut clients, a)?, Ok(2));
        assert!(slots.remove(0).is_none(), "0 was evicted");
        // 1's request waits in its socket; 2's thread has read a byte.
        clients[1].write_all(b"GET / HTTP/1.1\r\n\r\n")?;
        if let Some(entry) = slots.open.get(&2) {
            entry.received.store(true, Ordering::Release);
        }
        // A is at its cap with busy connections only.
        assert_eq!(admit(&mut slots, &mut clients, a)?, Err(Full::Client));
        // B fits under the total cap; B's next one finds the server full of busy
        // connections but its own idle one.
        assert_eq!(admit(&mut slots, &mut clients, b)?, Ok(3));
        assert_eq!(slots.len(), 3);
        assert_eq!(admit(&mut slots, &mut clients, b)?, Ok(4));
        assert!(slots.remove(3).is_none(), "3 made room for 4");
        clients[5].write_all(b"G")?;
        assert_eq!(admit(&mut slots, &mut clients, b)?, Err(Full::Server));
        Ok(())
    }
}
