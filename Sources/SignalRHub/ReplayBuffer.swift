import DequeModule
import NIOConcurrencyHelpers
import RealtimeCore

/// Stateful reconnect's bookkeeping for one connection (HubProtocol.md, "Stateful Reconnect";
/// the TypeScript client's MessageBuffer): messages of types 1 to 5 are numbered from 1 in each
/// direction. What we send stays in the buffer until the server acknowledges it, and goes out
/// again after the WebSocket is replaced; what we receive is counted, acknowledged about once a
/// second, and a message whose number we have already processed is dropped.
///
/// The buffer holds at most `limit` bytes of unacknowledged messages: a send that takes it past the
/// limit waits until acknowledgements make room (backpressure, not an unbounded queue).
final class ReplayBuffer: Sendable {
    struct State {
        var items: Deque<(id: Int64, bytes: [UInt8])> = []
        var sent: Int64 = 0
        var bufferedBytes = 0
        var waiters: [(id: Int64, reply: OneShot<Void>)] = []
        /// The WebSocket is gone and not replaced yet: sends only go into the buffer.
        var reconnecting = false
        var waitingForSequence = false
        var nextReceiving: Int64 = 1
        var latestReceived: Int64 = 0
        var ackPending = false
        var failed: RealtimeError?
    }

    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    var isReconnecting: Bool { state.withLockedValue { $0.reconnecting } }
    var bufferedByteCount: Int { state.withLockedValue { $0.bufferedBytes } }

    /// Records an outgoing sequenced message. Returns whether to write it now (not while the
    /// socket is being replaced; the resend will) and a wait for room when the buffer is full.
    func record(_ bytes: [UInt8]) -> (sendNow: Bool, wait: OneShot<Void>?) {
        state.withLockedValue { state in
            if let failed = state.failed {
                let reply = OneShot<Void>()
                reply.complete(.failure(failed))
                return (false, reply)
            }
            state.sent += 1
            state.items.append((state.sent, bytes))
            state.bufferedBytes += bytes.count
            var wait: OneShot<Void>?
            if state.bufferedBytes >= limit {
                let reply = OneShot<Void>()
                state.waiters.append((state.sent, reply))
                wait = reply
            }
            return (!state.reconnecting, wait)
        }
    }

    /// The server processed everything up to `id`.
    func ack(_ id: Int64) {
        let released = state.withLockedValue { state -> [OneShot<Void>] in
            while let first = state.items.first, first.id <= id {
                state.bufferedBytes -= first.bytes.count
                state.items.removeFirst()
            }
            guard state.bufferedBytes < limit else {
                // Still full: release only the waiters whose own message was acknowledged.
                let (done, rest) = (state.waiters.filter { $0.id <= id }, state.waiters.filter { $0.id > id })
                state.waiters = rest
                return done.map(\.reply)
            }
            defer { state.waiters = [] }
            return state.waiters.map(\.reply)
        }
        for reply in released { reply.complete(.success(())) }
    }

    /// Whether an incoming message is new (to process) or a duplicate of one already processed.
    /// `scheduleAck` asks the owner to send an Ack about a second from now.
    func receive(_ message: HubMessage) -> (process: Bool, scheduleAck: Bool) {
        state.withLockedValue { state in
            if state.waitingForSequence {
                guard case .sequence = message else { return (false, false) }
                state.waitingForSequence = false
                return (true, false)
            }
            guard message.isSequenced else { return (true, false) }
            let id = state.nextReceiving
            state.nextReceiving += 1
            let schedule = !state.ackPending
            if id <= state.latestReceived {
                // A duplicate replayed after a reconnect: the server has not seen our Ack yet.
                if id == state.latestReceived { state.ackPending = true }
                return (false, schedule && id == state.latestReceived)
            }
            state.latestReceived = id
            state.ackPending = true
            return (true, schedule)
        }
    }

    /// The Ack to send now (nil while reconnecting), clearing the pending flag.
    func takeAck() -> Int64? {
        state.withLockedValue { state in
            state.ackPending = false
            return state.reconnecting ? nil : state.latestReceived
        }
    }

    /// The server's Sequence: its next message has number `id`.
    func sequence(_ id: Int64) throws {
        let received = state.withLockedValue { state -> Int64? in
            guard id <= state.nextReceiving else { return state.nextReceiving - 1 }
            state.nextReceiving = id
            return nil
        }
        if let received {
            throw RealtimeError(.protocolViolation, "the server's Sequence \(id) is past the \(received) messages received")
        }
    }

    /// The WebSocket dropped: buffer sends, and drop what arrives until the server's Sequence.
    func disconnected() {
        state.withLockedValue { state in
            state.reconnecting = true
            state.waitingForSequence = true
        }
    }

    /// What to write on the new WebSocket: Sequence (the oldest unacknowledged id, or the next
    /// id), then every unacknowledged message in order. Sends resume after the caller wrote them.
    func resendPlan() -> (sequenceId: Int64, messages: [[UInt8]]) {
        state.withLockedValue { state in
            let first = state.items.first?.id ?? state.sent + 1
            return (first, state.items.map(\.bytes))
        }
    }

    func resumed() { state.withLockedValue { $0.reconnecting = false } }

    /// The connection is over: senders waiting for room fail.
    func fail(_ error: RealtimeError) {
        let waiters = state.withLockedValue { state -> [OneShot<Void>] in
            state.failed = error
            defer { state.waiters = [] }
            return state.waiters.map(\.reply)
        }
        for reply in waiters { reply.complete(.failure(error)) }
    }
}

extension HubConnection {
    /// Every outgoing message goes through here: straight to the transport, or, with stateful
    /// reconnect, numbered and kept until the server acknowledges it.
    func transmit(_ message: HubMessage, on session: Session) async throws {
        let bytes = codec.encode(message)
        guard let replay = state.withLockedValue({ $0.replay }) else {
            try await session.send(bytes)
            state.withLockedValue { $0.machine.didSend(now: timeline.now) }
            return
        }
        if message.isSequenced {
            let (sendNow, wait) = replay.record(bytes)
            if sendNow, let current = state.withLockedValue({ $0.session }) {
                // A failed write is not lost: the buffer keeps it for the resend.
                if (try? await current.send(bytes)) != nil {
                    state.withLockedValue { $0.machine.didSend(now: timeline.now) }
                }
            }
            if let wait { try await wait.value() }
        } else if !replay.isReconnecting, let current = state.withLockedValue({ $0.session }) {
            // Pings, Acks: only on a live socket, never replayed.
            try await current.send(bytes)
            state.withLockedValue { $0.machine.didSend(now: timeline.now) }
        }
    }
}
