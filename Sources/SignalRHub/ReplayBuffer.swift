import DequeModule
import NIOConcurrencyHelpers
@_spi(RealtimeEngine) import RealtimeCore

/// Stateful reconnect's bookkeeping for one connection (HubProtocol.md, "Stateful Reconnect";
/// the TypeScript client's MessageBuffer): messages of types 1 to 5 are numbered from 1 in each
/// direction. What we send stays in the buffer until the server acknowledges it, and goes out
/// again after the WebSocket is replaced; what we receive is counted, acknowledged about once a
/// second, and a message whose number we have already processed is dropped.
///
/// The buffer holds at most `limit` bytes of unacknowledged messages, and the one message that took
/// it past the limit: a send is admitted (`admit`) before it is recorded or written, and while the
/// buffer is at or past the limit it waits, in order, until acknowledgements make room
/// (backpressure, not an unbounded queue, however many tasks send at once).
///
/// SignalRTestServer uses the same bookkeeping for its side; the client's behaviour is also tested
/// against aiosignalr's own implementation.
package final class ReplayBuffer: Sendable {
    struct State {
        var items: Deque<(id: Int64, bytes: [UInt8])> = []
        var sent: Int64 = 0
        var bufferedBytes = 0
        /// Bytes of admitted messages not recorded yet.
        var reservedBytes = 0
        /// Sends waiting for room, in arrival order, with their sizes.
        var waiters: Deque<(size: Int, reply: OneShot<Void>)> = []
        /// The WebSocket is gone and not replaced yet: sends only go into the buffer.
        var reconnecting = false
        var waitingForSequence = false
        var nextReceiving: Int64 = 1
        var latestReceived: Int64 = 0
        var ackPending = false
        var lastAcked: Int64 = 0
        var failed: RealtimeError?
    }

    let limit: Int
    /// Held while a message is recorded and written, and during a resend.
    package let gate = FIFOGate()
    private let state = NIOLockedValueBox(State())

    package init(limit: Int) {
        self.limit = max(1, limit)
    }

    package var isReconnecting: Bool { state.withLockedValue { $0.reconnecting } }
    package var bufferedByteCount: Int { state.withLockedValue { $0.bufferedBytes } }
    /// The sequence id of the last message recorded (0 before the first).
    package var lastSentId: Int64 { state.withLockedValue { $0.sent } }

    /// Asks room for an outgoing sequenced message of `size` bytes: nil when it may be recorded now
    /// (its bytes are reserved), else a wait that completes when acknowledgements made room, or
    /// fails when the connection is over. A message is admitted while the buffer holds less than
    /// `limit` bytes and nobody waits before it.
    package func admit(_ size: Int) -> OneShot<Void>? {
        state.withLockedValue { state in
            if let failed = state.failed {
                let reply = OneShot<Void>()
                reply.complete(.failure(failed))
                return reply
            }
            guard state.waiters.isEmpty, state.bufferedBytes + state.reservedBytes < limit else {
                let reply = OneShot<Void>()
                state.waiters.append((size, reply))
                return reply
            }
            state.reservedBytes += size
            return nil
        }
    }

    /// Records an admitted outgoing sequenced message. Returns whether to write it now (not while
    /// the socket is being replaced; the resend will).
    package func record(_ bytes: [UInt8]) throws(RealtimeError) -> Bool {
        let outcome = state.withLockedValue { state -> Result<Bool, RealtimeError> in
            if let failed = state.failed { return .failure(failed) }
            state.reservedBytes = max(0, state.reservedBytes - bytes.count)
            state.sent += 1
            state.items.append((state.sent, bytes))
            state.bufferedBytes += bytes.count
            return .success(!state.reconnecting)
        }
        return try outcome.get()
    }

    /// The server processed everything up to `id`: its messages leave the buffer, and the sends
    /// waiting for room are admitted in order while there is room.
    package func ack(_ id: Int64) {
        let released = state.withLockedValue { state -> [OneShot<Void>] in
            while let first = state.items.first, first.id <= id {
                state.bufferedBytes -= first.bytes.count
                state.items.removeFirst()
            }
            var released: [OneShot<Void>] = []
            while let first = state.waiters.first, state.bufferedBytes + state.reservedBytes < limit {
                state.waiters.removeFirst()
                state.reservedBytes += first.size
                released.append(first.reply)
            }
            return released
        }
        for reply in released { reply.complete(.success(())) }
    }

    /// Whether an incoming message is new (to process) or a duplicate of one already processed.
    /// `scheduleAck` asks the owner to send an Ack about a second from now.
    package func receive(_ message: HubMessage) -> (process: Bool, scheduleAck: Bool) {
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

    /// The Ack to send now (nil while reconnecting: ``finishResend(sentThrough:)`` sends it then),
    /// clearing the pending flag.
    package func takeAck() -> Int64? {
        state.withLockedValue { state in
            state.ackPending = false
            guard !state.reconnecting, state.latestReceived > 0 else { return nil }
            state.lastAcked = state.latestReceived
            return state.latestReceived
        }
    }

    /// The server's Sequence: its next message has number `id`.
    package func sequence(_ id: Int64) throws {
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
    package func disconnected() {
        state.withLockedValue { state in
            state.reconnecting = true
            state.waitingForSequence = true
        }
    }

    /// What to write on the new WebSocket: Sequence (the oldest unacknowledged id, or the next
    /// id), then every unacknowledged message in order, through `lastId`.
    package func resendPlan() -> (sequenceId: Int64, messages: [[UInt8]], lastId: Int64) {
        state.withLockedValue { state in
            let first = state.items.first?.id ?? state.sent + 1
            return (first, state.items.map(\.bytes), state.sent)
        }
    }

    package enum ResendStep {
        /// Messages recorded while the plan was being written: write these too, then ask again.
        case more([[UInt8]], lastId: Int64)
        /// Sending is live again; send this Ack now if set (one that came due while reconnecting).
        case done(ack: Int64?)
    }

    /// After writing everything through `sentThrough`: either the messages recorded meanwhile, or
    /// the switch back to live sending, atomically, so nothing recorded during the resend is missed.
    package func finishResend(sentThrough: Int64) -> ResendStep {
        state.withLockedValue { state in
            if state.sent > sentThrough {
                return .more(state.items.filter { $0.id > sentThrough }.map(\.bytes), lastId: state.sent)
            }
            state.reconnecting = false
            guard state.latestReceived > state.lastAcked else { return .done(ack: nil) }
            state.lastAcked = state.latestReceived
            return .done(ack: state.latestReceived)
        }
    }

    /// The connection is over: senders waiting for room fail.
    package func fail(_ error: RealtimeError) {
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
        try await transmit(encoded: bytes, message, on: session)
        metrics.sent(messages: 1, bytes: bytes.count)
    }

    private func transmit(encoded bytes: [UInt8], _ message: HubMessage, on session: Session) async throws {
        guard let replay = state.withLockedValue({ $0.replay }) else {
            try await session.send(bytes)
            state.withLockedValue { $0.machine.didSend(now: timers.now) }
            return
        }
        if message.isSequenced {
            // Room first: a send that waits is neither buffered nor written.
            if let wait = replay.admit(bytes.count) { try await wait.value() }
            try await replay.gate.withLock {
                if try replay.record(bytes), let current = state.withLockedValue({ $0.session }) {
                    // A failed write is not lost: the buffer keeps it for the resend.
                    if (try? await current.send(bytes)) != nil {
                        state.withLockedValue { $0.machine.didSend(now: timers.now) }
                    }
                }
            }
        } else if !replay.isReconnecting, let current = state.withLockedValue({ $0.session }) {
            // Pings, Acks: only on a live socket, never replayed.
            try await current.send(bytes)
            state.withLockedValue { $0.machine.didSend(now: timers.now) }
        }
    }
}

extension ReplayBuffer {
    /// Writes the resend plan with `write`, then whatever was recorded meanwhile, and switches back
    /// to live sending; returns the Ack that came due while reconnecting, if any.
    package func resend(_ sequenceMessage: (Int64) -> [UInt8], write: ([UInt8]) async throws -> Void) async throws -> Int64? {
        let plan = resendPlan()
        try await write(sequenceMessage(plan.sequenceId))
        for bytes in plan.messages { try await write(bytes) }
        var through = plan.lastId
        while true {
            switch finishResend(sentThrough: through) {
            case .more(let messages, let lastId):
                for bytes in messages { try await write(bytes) }
                through = lastId
            case .done(let ack):
                return ack
            }
        }
    }
}
