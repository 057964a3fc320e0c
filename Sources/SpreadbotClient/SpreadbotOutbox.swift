import NIOConcurrencyHelpers
import NIOCore
@_spi(RealtimeEngine) import RealtimeCore

/// A send the app made, until the stream delivered it or reported why not.
///
/// ``delivered()`` returns once the message went out (a WebSocket frame written to the socket, or
/// a POST answered 2xx) and throws when it never will (the connection was closed, the reconnect
/// attempts ran out, the server refused the POST with a 4xx).
public struct SpreadbotDelivery: Sendable {
    /// The message's number on this client (1, 2, ...), also its POST's `Spreadbot-Message-Id`.
    public let sequence: UInt64
    let done: OneShot<Void>

    /// Waits until the message went out, or throws why it will not.
    public func delivered() async throws { try await done.value() }
}

/// The stream's outgoing messages in order, on RealtimeCore's ``Outbox``: queued while offline (at
/// most `offlineCapacity`), taken one at a time by the session's writer while connected (at most
/// `connectedCapacity` waiting). A message leaves only when delivered or failed, never silently:
/// a write that fails puts it back first in line for the next connection.
final class SpreadbotOutbox: Sendable {
    struct Item: OutboxMessage {
        let sequence: UInt64
        let data: SpreadbotData
        let done: OneShot<Void>
        /// Connections in a row whose server refused this message's POST with a 5xx or a reset on
        /// every attempt (see ``SpreadbotOutbox/refusalsBeforeDropping``).
        var refusals = 0
        /// Capacities count messages.
        var outboxSize: Int { 1 }
        var outboxParts: Int { 1 }
        var isApplicationData: Bool { true }
    }

    private struct State {
        var connected = false
        var closed: RealtimeError?
        var nextSequence: UInt64 = 1
        /// Accepted and not yet delivered or failed (queued or being written).
        var pending = 0
    }

    /// A message whose POST every attempt of this many connections in a row answered with a 5xx or
    /// a reset is dropped (failed with the last refusal, and reported), so it cannot hold the
    /// messages after it forever: a server or proxy that cannot take it (a body over its limit
    /// answered with a reset or a 502) would refuse it unchanged after every reconnect.
    static let refusalsBeforeDropping = 2

    private let outbox = Outbox<Item>()
    private let state = NIOLockedValueBox(State())
    let offlineCapacity: Int
    let connectedCapacity: Int

    init(offlineCapacity: Int, connectedCapacity: Int) {
        self.offlineCapacity = max(0, offlineCapacity)
        self.connectedCapacity = max(1, connectedCapacity)
    }

    /// Messages not delivered yet (waiting, or being written).
    var count: Int { state.withLockedValue { $0.pending } }

    /// Adds a message. Throws `queueFull` when the offline queue (or, while connected, the pending
    /// limit) is full, and `notConnected` after ``close(_:)``.
    func enqueue(_ data: SpreadbotData) throws -> SpreadbotDelivery {
        let item = try state.withLockedValue { state throws -> Item in
            if state.closed != nil {
                throw RealtimeError(.notConnected, "the connection is closed; establishConnection(path:) opens it again")
            }
            let capacity = state.connected ? connectedCapacity : offlineCapacity
            guard capacity > 0, state.pending < capacity else { throw RealtimeError.queueFull(capacity: capacity) }
            state.pending += 1
            let item = Item(sequence: state.nextSequence, data: data, done: OneShot())
            state.nextSequence += 1
            // Under this lock: the push is in sequence order.
            outbox.push(item)
            return item
        }
        return SpreadbotDelivery(sequence: item.sequence, done: item.done)
    }

    /// Opens the outbox to new sends again after a close (a new `establishConnection`).
    func reopen() {
        state.withLockedValue { $0.closed = nil }
        outbox.reopen()
    }

    func setConnected(_ connected: Bool) {
        state.withLockedValue { $0.connected = connected }
    }

    /// The next message for the session's writer (one at a time: each is one frame or one POST);
    /// nil when the writer's task is cancelled or the outbox closed. Hand it back with
    /// ``delivered(_:)``, ``failed(_:_:)`` or ``writeFailed(_:)``.
    func next() async -> Item? {
        await outbox.take(maxBytes: 1, generation: outbox.generation)?.first
    }

    /// The message went out.
    func delivered(_ item: Item) {
        state.withLockedValue { $0.pending -= 1 }
        outbox.finishedWrite()
        item.done.complete(.success(()))
    }

    /// The message will never go out (the server refused it).
    func failed(_ item: Item, _ error: any Error) {
        state.withLockedValue { $0.pending -= 1 }
        outbox.finishedWrite()
        item.done.complete(.failure(error))
    }

    /// The connection failed while writing it: first in line again for the next connection.
    func writeFailed(_ item: Item) {
        if let closed = state.withLockedValue({ $0.closed }) {
            // Closed meanwhile: nobody will write it again.
            failed(item, closed)
            return
        }
        outbox.requeueFront([item])
        outbox.finishedWrite()
    }

    /// Writes the queue over a WebSocket from its event loop as messages are queued (one frame
    /// each, in order): written messages are delivered, and after a failed write the rest go back
    /// first in line for the next connection (or fail, once closed) and the channel is closed, which
    /// ends the reader. `onWritten` is told of each batch written.
    func webSocketWriter(_ writer: WebSocketLoopWriter, onWritten: @escaping @Sendable ([Item]) -> Void) -> OutboxWebSocketWriter<Item> {
        OutboxWebSocketWriter(
            outbox: outbox, writer: writer, generation: outbox.generation,
            encode: { $1.append($0.data.webSocketMessage) },
            written: { [self] written, unwritten, failure in
                state.withLockedValue { $0.pending -= written.count }
                if failure != nil {
                    let closed = state.withLockedValue { $0.closed }
                    if let closed {
                        state.withLockedValue { $0.pending -= unwritten.count }
                        for item in unwritten { item.done.complete(.failure(closed)) }
                    } else {
                        outbox.requeueFront(Array(unwritten))
                    }
                }
                outbox.finishedWrite()
                for item in written { item.done.complete(.success(())) }
                if !written.isEmpty { onWritten(Array(written)) }
                if failure != nil { writer.closeChannel() }
            })
    }

    /// Returns when every queued message went out (or failed), or when the waiting task is cancelled.
    func waitUntilEmpty() async { await outbox.waitUntilEmpty() }

    /// Refuses new sends with `error` and fails every waiting one with it, oldest first. Returns
    /// their sequence numbers.
    @discardableResult
    func close(_ error: RealtimeError) -> [UInt64] {
        state.withLockedValue {
            $0.closed = error
            $0.connected = false
        }
        let items = outbox.takeUnsent().unwritten
        state.withLockedValue { $0.pending -= items.count }
        for item in items { item.done.complete(.failure(error)) }
        return items.map(\.sequence)
    }
}

extension SpreadbotData {
    /// The WebSocket message that carries it: a text or a binary frame.
    var webSocketMessage: RealtimeMessage {
        switch self {
        case .text(let text): .text(text)
        case .binary(let data): .binary(ByteBuffer(bytes: data))
        }
    }
}
