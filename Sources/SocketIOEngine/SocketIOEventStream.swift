import Foundation
import NIOConcurrencyHelpers

/// Server events of one namespace as an `AsyncSequence`, beside the handlers
/// (``SocketIOClient/events`` and ``SocketIOClient/events(named:bufferSize:overflow:)``).
///
/// Events are buffered between the connection's reading task and your loop, up to `bufferSize`.
/// The reading task never waits for you (it also answers the heartbeat), so when the buffer is full
/// the ``Overflow`` policy decides which event goes, and ``droppedCount`` counts them. The sequence
/// ends when the socket stops being active: ``SocketIOClient/disconnect()``, a DISCONNECT or
/// CONNECT_ERROR from the server, or reconnection giving up. Ending the loop (or cancelling its
/// task) unregisters it.
public struct SocketIOEventStream: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = SocketIOEvent

    /// Which event is dropped when the buffer is full.
    public struct Overflow: Hashable, Sendable {
        let keepNewest: Bool
        /// The oldest buffered event goes (the default: a live view stays current).
        public static let dropOldest = Overflow(keepNewest: true)
        /// The new event goes (what is buffered is kept).
        public static let dropNewest = Overflow(keepNewest: false)
    }

    let stream: AsyncStream<SocketIOEvent>
    let dropped: NIOLockedValueBox<Int>

    /// Events dropped because the buffer was full.
    public var droppedCount: Int { dropped.withLockedValue { $0 } }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator()) }

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<SocketIOEvent>.Iterator
        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async -> SocketIOEvent? { await base.next() }
    }
}

/// A registered event stream, as the socket's dispatch sees it.
struct EventStreamEntry: Sendable {
    let name: String?
    let continuation: AsyncStream<SocketIOEvent>.Continuation
    let dropped: NIOLockedValueBox<Int>

    func yield(_ event: SocketIOEvent) {
        if case .dropped = continuation.yield(event) { dropped.withLockedValue { $0 += 1 } }
    }
}

extension SocketIOClient {
    /// Every server event of this namespace, with a 1,024-event buffer that drops the oldest when full.
    /// Each access registers a new sequence: keep the one you iterate.
    public var events: SocketIOEventStream { events(named: nil) }

    /// Server events named `name` (every event when nil), buffered up to `bufferSize` with `overflow`
    /// deciding what goes when the buffer is full. Register before connecting to miss nothing.
    public func events(
        named name: String? = nil, bufferSize: Int = 1_024, overflow: SocketIOEventStream.Overflow = .dropOldest
    ) -> SocketIOEventStream {
        let size = max(1, bufferSize)
        let (stream, continuation) = AsyncStream.makeStream(
            of: SocketIOEvent.self, bufferingPolicy: overflow.keepNewest ? .bufferingNewest(size) : .bufferingOldest(size))
        let dropped = NIOLockedValueBox(0)
        let id = UUID()
        addStream(id, EventStreamEntry(name: name, continuation: continuation, dropped: dropped))
        continuation.onTermination = { [weak self] _ in self?.removeStream(id) }
        return SocketIOEventStream(stream: stream, dropped: dropped)
    }
}
