import DequeModule
import NIOConcurrencyHelpers
import RealtimeCore

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

/// The stream's outgoing messages in order: queued while offline, written by one session writer at a
/// time while connected. An element leaves only when delivered or failed, never silently.
final class SpreadbotOutbox: Sendable {
    struct Item: Sendable {
        let sequence: UInt64
        let data: SpreadbotData
        let done: OneShot<Void>
    }

    private struct State {
        var items: Deque<Item> = []
        var connected = false
        var closed: RealtimeError?
        var nextSequence: UInt64 = 1
        var writer: CheckedContinuation<Item?, Never>?
    }

    private let state = NIOLockedValueBox(State())
    let offlineCapacity: Int
    let connectedCapacity: Int

    init(offlineCapacity: Int, connectedCapacity: Int) {
        self.offlineCapacity = max(0, offlineCapacity)
        self.connectedCapacity = max(1, connectedCapacity)
    }

    var count: Int { state.withLockedValue { $0.items.count } }

    /// Adds a message. Throws `queueFull` when the offline queue (or, while connected, the pending
    /// limit) is full, and `notConnected` after ``close(_:)``.
    func enqueue(_ data: SpreadbotData) throws -> SpreadbotDelivery {
        let (item, writer) = try state.withLockedValue { state throws -> (Item, CheckedContinuation<Item?, Never>?) in
            if state.closed != nil {
                throw RealtimeError(.notConnected, "the connection is closed; establishConnection(path:) opens it again")
            }
            let capacity = state.connected ? connectedCapacity : offlineCapacity
            guard state.items.count < capacity else { throw RealtimeError.queueFull(capacity: capacity) }
            let item = Item(sequence: state.nextSequence, data: data, done: OneShot())
            state.nextSequence += 1
            state.items.append(item)
            defer { state.writer = nil }
            return (item, state.items.count == 1 ? state.writer : nil)
        }
        writer?.resume(returning: item)
        return SpreadbotDelivery(sequence: item.sequence, done: item.done)
    }

    /// Opens the outbox to new sends again after a close (a new `establishConnection`).
    func reopen() {
        state.withLockedValue { $0.closed = nil }
    }

    func setConnected(_ connected: Bool) {
        state.withLockedValue { $0.connected = connected }
    }

    /// The oldest message, left in place until ``delivered(_:)`` or ``failed(_:_:)``; waits for one.
    /// Returns nil when the calling task is cancelled.
    func head() async -> Item? {
        if let first = state.withLockedValue({ $0.items.first }) { return first }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Item?, Never>) in
                let now = state.withLockedValue { state -> Item?? in
                    if let first = state.items.first { return .some(first) }
                    if Task.isCancelled { return .some(nil) }
                    state.writer = continuation
                    return .none
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            state.withLockedValue { state in
                defer { state.writer = nil }
                return state.writer
            }?.resume(returning: nil)
        }
    }

    /// The head went out.
    func delivered(_ item: Item) {
        remove(item)?.done.complete(.success(()))
    }

    /// The head will never go out (the server refused it).
    func failed(_ item: Item, _ error: any Error) {
        remove(item)?.done.complete(.failure(error))
    }

    private func remove(_ item: Item) -> Item? {
        state.withLockedValue { state -> Item? in
            guard state.items.first?.sequence == item.sequence else { return nil }
            return state.items.removeFirst()
        }
    }

    /// Refuses new sends with `error` and fails every waiting one with it, oldest first. Returns how
    /// many were failed.
    @discardableResult
    func close(_ error: RealtimeError) -> [UInt64] {
        let items = state.withLockedValue { state -> Deque<Item> in
            state.closed = error
            state.connected = false
            defer { state.items.removeAll() }
            return state.items
        }
        for item in items { item.done.complete(.failure(error)) }
        return items.map(\.sequence)
    }
}
