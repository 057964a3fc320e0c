import DequeModule
import NIOConcurrencyHelpers
@_spi(RealtimeEngine) import RealtimeCore

/// Stateful reconnect's bookkeeping for one connection (HubProtocol.md, "Stateful Reconnect";
/// the TypeScript client's MessageBuffer): messages of types 1 to 5 are numbered from 1 in each
/// direction. What we send is numbered as it is queued in the connection's outbox (RealtimeCore's
/// ``Outbox``, through ``HubOutbox``), which keeps it after it is written until the server
/// acknowledges it and puts it back in line, after a Sequence message, when the WebSocket is
/// replaced; what we receive is counted, acknowledged about once a second, and a message whose
/// number we have already processed is dropped.
///
/// The connection holds at most `limit` bytes of unacknowledged messages, and the one message that
/// took it past the limit: a send is admitted (`admit`) before it is numbered and queued, and while
/// the buffer is at or past the limit it waits, in order, until acknowledgements make room
/// (backpressure, not an unbounded queue, however many tasks send at once).
///
/// SignalRTestServer uses the same rules for its side, written separately; the client's behaviour
/// is also tested against aiosignalr's own implementation.
final class ReplayBuffer: Sendable {
    struct State {
        /// The number of the last message queued (0 before the first).
        var sent: Int64 = 0
        /// Bytes of numbered messages not acknowledged yet (queued or written).
        var bufferedBytes = 0
        /// Bytes of admitted messages not numbered yet.
        var reservedBytes = 0
        /// The highest number the server acknowledged.
        var acknowledged: Int64 = 0
        /// Sends waiting for room, in arrival order, with their sizes.
        var waiters: Deque<(size: Int, reply: OneShot<Void>)> = []
        /// The WebSocket is gone and not replaced yet: only numbered messages are queued.
        var reconnecting = false
        var waitingForSequence = false
        var nextReceiving: Int64 = 1
        var latestReceived: Int64 = 0
        var ackPending = false
        var lastAcked: Int64 = 0
        var failed: RealtimeError?
    }

    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    var isReconnecting: Bool { state.withLockedValue { $0.reconnecting } }
    var bufferedByteCount: Int { state.withLockedValue { $0.bufferedBytes } }
    /// The sequence id of the last message queued (0 before the first).
    var lastSentId: Int64 { state.withLockedValue { $0.sent } }

    /// Asks room for an outgoing sequenced message of `size` bytes: nil when it may be queued now
    /// (its bytes are reserved), else a wait that completes when acknowledgements made room, or
    /// fails when the connection is over. A message is admitted while the buffer holds less than
    /// `limit` bytes and nobody waits before it.
    func admit(_ size: Int) -> OneShot<Void>? {
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

    /// Numbers an admitted message and queues it in `outbox`, under this buffer's lock, so that the
    /// numbers follow the queue's order whatever tasks send at once.
    func enqueue(_ bytes: [UInt8], in outbox: Outbox<HubFrame>) throws(RealtimeError) {
        if let failed = state.withLockedValue({ $0.failed }) { throw failed }
        // Numbered under the outbox's lock (this buffer's lock is taken inside it, never the
        // other way round): the write a push may start must not find this lock held.
        let queued = outbox.push {
            state.withLockedValue { state in
                state.reservedBytes = max(0, state.reservedBytes - bytes.count)
                state.sent += 1
                state.bufferedBytes += bytes.count
                return HubFrame(bytes: bytes, sequenceId: state.sent)
            }
        }
        guard queued else { throw RealtimeError(.connectionClosed, "the connection is closed") }
    }

    /// The server processed everything up to `id`: those messages leave the outbox, and the sends
    /// waiting for room are admitted in order while there is room.
    func acknowledge(_ id: Int64, in outbox: Outbox<HubFrame>) {
        let freed = outbox.confirmOldest { $0.sequenceId <= id }
        let released = state.withLockedValue { state -> [OneShot<Void>] in
            state.acknowledged = max(state.acknowledged, id)
            state.bufferedBytes -= freed
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

    /// Messages were written again after the server had acknowledged them (an Ack that came while
    /// they waited in line for a resend): they leave the outbox now.
    func written(_ frames: ArraySlice<HubFrame>, in outbox: Outbox<HubFrame>) {
        guard let first = frames.first(where: { $0.sequenceId != 0 }) else { return }
        let acknowledged = state.withLockedValue { $0.acknowledged }
        if first.sequenceId <= acknowledged { acknowledge(acknowledged, in: outbox) }
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

    /// The Ack to send now (nil while reconnecting: ``finishResend(sentThrough:)`` sends it then),
    /// clearing the pending flag.
    func takeAck() -> Int64? {
        state.withLockedValue { state in
            state.ackPending = false
            guard !state.reconnecting, state.latestReceived > 0 else { return nil }
            state.lastAcked = state.latestReceived
            return state.latestReceived
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

    /// The WebSocket was replaced: the outbox puts the Sequence message (the oldest unacknowledged
    /// number, or the next one) and every unacknowledged message back in line before what was queued
    /// meanwhile, and sending is live again. Returns the Ack that came due while reconnecting.
    func resume(_ outbox: Outbox<HubFrame>, sequenceMessage: (Int64) -> [UInt8]) -> Int64? {
        let next = state.withLockedValue { $0.sent + 1 }
        // A message queued after `next` was read is in the queue: the outbox finds it as the oldest.
        outbox.rewind { oldest in HubFrame(bytes: sequenceMessage(oldest?.sequenceId ?? next), sequenceId: 0) }
        return state.withLockedValue { state in
            state.reconnecting = false
            guard state.latestReceived > state.lastAcked else { return nil }
            state.lastAcked = state.latestReceived
            return state.latestReceived
        }
    }

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
