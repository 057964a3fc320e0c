import DequeModule
import NIOConcurrencyHelpers
import RealtimeCore

/// SignalRTestServer's side of stateful reconnect, written from the protocol description
/// (HubProtocol.md, "Stateful reconnect"; ../shared/specs/signalr.md) and kept apart from the client's
/// `ReplayBuffer`, so that the client is checked against an independent reading of the rules:
///
/// - Messages of types 1-5 are numbered from 1 in each direction.
/// - The receiver acknowledges the highest id it processed (here about a second after the first
///   message not yet acknowledged, and once more right after a re-attach).
/// - After a re-attach each side sends Sequence with the id of its oldest unacknowledged message (the
///   next id if none), then those messages; the receiver drops what it already processed.
/// - A Sequence id beyond the next expected one means messages were lost: the connection fails.
///
/// The server keeps every unacknowledged message (no byte limit: a test server must not stall its
/// read loop).
final class ServerStatefulLog: Sendable {
    private struct State {
        var nextOutgoingId: Int64 = 1
        var unacknowledged: Deque<(id: Int64, bytes: [UInt8])> = []
        /// The socket is gone: sequenced messages are kept, nothing is written.
        var detached = false
        var nextIncomingId: Int64 = 1
        var highestProcessed: Int64 = 0
        var ackScheduled = false
    }

    private let state = NIOLockedValueBox(State())
    /// Orders recording with writing, so the wire order is the numbering order and a replay never
    /// interleaves with live writes.
    let writeOrder = FIFOGate()

    var isDetached: Bool { state.withLockedValue { $0.detached } }

    /// Numbers and keeps an outgoing sequenced message; true when it may be written now.
    func recordOutgoing(_ bytes: [UInt8]) -> Bool {
        state.withLockedValue { state in
            state.unacknowledged.append((state.nextOutgoingId, bytes))
            state.nextOutgoingId += 1
            return !state.detached
        }
    }

    /// The client processed everything up to `id`.
    func acknowledged(_ id: Int64) {
        state.withLockedValue { state in
            while let first = state.unacknowledged.first, first.id <= id { state.unacknowledged.removeFirst() }
        }
    }

    /// An incoming sequenced message: whether to process it (false for one already processed) and
    /// whether an Ack should be scheduled.
    func incoming() -> (process: Bool, scheduleAck: Bool) {
        state.withLockedValue { state in
            let id = state.nextIncomingId
            state.nextIncomingId += 1
            guard id > state.highestProcessed else { return (false, false) }
            state.highestProcessed = id
            defer { state.ackScheduled = true }
            return (true, !state.ackScheduled)
        }
    }

    /// The Ack to send now (the highest processed id), nil when nothing was processed.
    func takeAck() -> Int64? {
        state.withLockedValue { state in
            state.ackScheduled = false
            return state.highestProcessed > 0 ? state.highestProcessed : nil
        }
    }

    /// The client's Sequence: its next message carries `id`.
    func sequence(_ id: Int64) throws {
        try state.withLockedValue { state in
            guard id >= 1, id <= state.highestProcessed + 1 else {
                throw SignalRTestServerError(message: "Sequence \(id) skips messages: only \(state.highestProcessed) were received")
            }
            state.nextIncomingId = id
        }
    }

    func detach() { state.withLockedValue { $0.detached = true } }

    /// For a re-attach (call inside `writeOrder`): the Sequence id and the messages to write again;
    /// live writes resume after them.
    func reattach() -> (sequenceId: Int64, messages: [[UInt8]], ack: Int64?) {
        state.withLockedValue { state in
            state.detached = false
            let sequenceId = state.unacknowledged.first?.id ?? state.nextOutgoingId
            return (sequenceId, state.unacknowledged.map(\.bytes), state.highestProcessed > 0 ? state.highestProcessed : nil)
        }
    }
}
