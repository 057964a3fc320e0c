import Foundation
@_spi(RealtimeEngine) import RealtimeCore

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

    let registration: EventStreamRegistration

    /// Events dropped because the buffer was full.
    public var droppedCount: Int { registration.buffer.droppedCount }

    /// How many times the loop was handed events (once per batch a connection read brought, not
    /// once per event), for tests of the hand-over.
    package var consumerWakeUps: Int { registration.buffer.consumerWakeUps }
    /// Whether a loop waits for the next event now (for tests that pace a server by the reader).
    package var isConsumerWaiting: Bool { registration.buffer.hasWaitingConsumer }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: EventStreamReader(registration)) }

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let reader: EventStreamReader
        /// The next element, or `nil` once the sequence has ended (or the task was cancelled).
        public mutating func next() async -> SocketIOEvent? { await reader.next() }
    }
}

/// A registered event stream: the socket's dispatch appends to its buffer. Unregistered when the
/// sequence and every iterator of it are gone, or when an iterator ends.
final class EventStreamRegistration: Sendable {
    let name: String?
    let buffer: InboundBuffer<SocketIOEvent>
    let id = UUID()
    private weak let socket: SocketIOClient?

    init(name: String?, buffer: InboundBuffer<SocketIOEvent>, socket: SocketIOClient) {
        self.name = name
        self.buffer = buffer
        self.socket = socket
    }

    /// No loop will read on: the socket stops delivering here and what waits is let go.
    func end() {
        socket?.removeStream(id)
        buffer.finish()
        buffer.discardBuffered()
    }

    deinit { end() }
}

/// One iterator's reading of a registration's buffer: its batch, walked without a lock per event.
/// The loop's end (this reader let go) unregisters the sequence, as does the task's cancellation.
final class EventStreamReader {
    private let registration: EventStreamRegistration
    private var base: InboundBuffer<SocketIOEvent>.Iterator
    private var ended = false

    init(_ registration: EventStreamRegistration) {
        self.registration = registration
        base = InboundBuffer.Iterator(registration.buffer)
    }

    func next() async -> SocketIOEvent? {
        guard !ended else { return nil }
        do {
            if let event = try await base.next() { return event }
        } catch {
            // Cancelled while waiting: the sequence ends, as an AsyncStream's does.
            registration.end()
        }
        ended = true
        return nil
    }

    deinit { registration.end() }
}

extension SocketIOClient {
    /// Every server event of this namespace, with a 1,024-event buffer that drops the oldest when full.
    /// Each access registers a new sequence: keep the one you iterate.
    public var events: SocketIOEventStream { events(named: nil) }

    /// Server events named `name` (every event when nil), buffered up to `bufferSize` with `overflow`
    /// deciding what goes when the buffer is full. Register before connecting to miss nothing.
    ///
    /// The events a connection read brings reach the loop in one hand-over: a loop that keeps up is
    /// resumed once per read, not once per event. Up to `bufferSize` events wait for the loop,
    /// besides those of the batch it is walking.
    public func events(
        named name: String? = nil, bufferSize: Int = 1_024, overflow: SocketIOEventStream.Overflow = .dropOldest
    ) -> SocketIOEventStream {
        let buffer = InboundBuffer<SocketIOEvent>(limit: max(1, bufferSize), overflow: overflow.keepNewest ? .dropOldest : .dropNewest)
        let registration = EventStreamRegistration(name: name, buffer: buffer, socket: self)
        addStream(registration.id, EventStreamEntry(registration: registration))
        return SocketIOEventStream(registration: registration)
    }
}

/// A registered event stream, as the socket's dispatch sees it (its buffer, not the registration:
/// the sequence and its iterators keep that alive).
struct EventStreamEntry: Sendable {
    let name: String?
    let buffer: InboundBuffer<SocketIOEvent>

    init(registration: EventStreamRegistration) {
        name = registration.name
        buffer = registration.buffer
    }

    /// Appends `event` for the loop. On the event loop that reads the connection, the loop is woken
    /// once after the whole read is handled, not once per event.
    func yield(_ event: SocketIOEvent) { buffer.append(event) }

    func finish() { buffer.finish() }
}
