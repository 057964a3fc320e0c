public import RealtimeCore
import NIOConcurrencyHelpers
import NIOCore

/// A server-to-client stream, as the official Swift client shapes it.
public protocol StreamResult<Element>: Sendable {
    associatedtype Element: Sendable
    /// The items, in order; ends with the server's completion and throws its error.
    var stream: AsyncThrowingStream<Element, any Error> { get }
    /// Stops the stream: sends CancelInvocation and ends the sequence.
    func cancel() async
}

/// A stream's raw items. Reading happens through a bounded buffer: when the consumer is slow, the
/// connection stops reading from the server once `streamBufferSize` items wait. Items arrive in
/// batches (all that one read from the socket carried), so a consumer that keeps up is woken once
/// per read, not once per item.
public struct HubRawStream: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = JSONValue
    let buffer: InboundBuffer<JSONValue>
    let cancelAction: @Sendable () async -> Void
    /// The connection's event loop, where the items are read.
    let eventLoop: any EventLoop
    /// The `AsyncThrowingStream` made the first time ``HubStream/stream`` was asked for (every later
    /// ask gets the same one).
    private let pushed = NIOLockedValueBox<(any Sendable)?>(nil)

    init(buffer: InboundBuffer<JSONValue>, eventLoop: any EventLoop, cancel: @escaping @Sendable () async -> Void) {
        self.buffer = buffer
        self.eventLoop = eventLoop
        cancelAction = cancel
    }

    /// The items, transformed, as an `AsyncThrowingStream` fed where they are read (see
    /// `InboundBuffer.push(into:retryingOn:_:)`); made once.
    func pushedStream<Output: Sendable>(_ transform: @escaping @Sendable (JSONValue) throws -> Output) -> AsyncThrowingStream<Output, any Error> {
        typealias Stream = AsyncThrowingStream<Output, any Error>
        let limit = buffer.limit
        let (stream, continuation) = pushed.withLockedValue { cached -> (Stream, Stream.Continuation?) in
            if let stream = cached as? Stream { return (stream, nil) }
            let made = Stream.makeStream(of: Output.self, throwing: (any Error).self, bufferingPolicy: .bufferingOldest(limit))
            cached = made.stream
            return (made.stream, made.continuation)
        }
        if let continuation { buffer.push(into: continuation, retryingOn: eventLoop, transform) }
        return stream
    }

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: InboundBuffer<JSONValue>.Iterator
        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> JSONValue? { try await base.next(isolation: nil) }
        /// The next item, in the caller's isolation (no hop off the caller's actor per item).
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> JSONValue? {
            try await base.next(isolation: actor)
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: InboundBuffer.Iterator(buffer)) }

    /// Sends CancelInvocation (when the stream is still running) and ends the sequence.
    public func cancel() async { await cancelAction() }

    /// How many times the reader was handed items (once per batch a read brought), for tests of
    /// the hand-over.
    package var consumerWakeUps: Int { buffer.consumerWakeUps }
    /// Whether a loop over the sequence waits for the next item now (for tests that pace a server
    /// by the reader).
    package var isConsumerWaiting: Bool { buffer.hasWaitingConsumer }
}

/// The typed items of a server-to-client stream (``HubConnection/stream(method:arguments:)``): an
/// `AsyncSequence` that decodes each item as it is read, and the official client's ``StreamResult``.
public struct HubStream<Element: Decodable & Sendable>: StreamResult, AsyncSequence {
    let raw: HubRawStream

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: HubRawStream.AsyncIterator

        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> Element? { try await next(isolation: nil) }

        /// The next item, decoded, in the caller's isolation.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> Element? {
            guard let value = try await base.next(isolation: actor) else { return nil }
            return try HubValueCoding.decode(value, as: Element.self)
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: raw.makeAsyncIterator()) }

    /// The items as the official client's `AsyncThrowingStream`: decoded where they are read (the
    /// connection's event loop) and handed to the stream there, so that its consumer is resumed on
    /// its own executor (its actor, or the event loop it prefers) with no hop per item. The stream
    /// holds at most `streamBufferSize` items; past that, items wait in the connection, and once as
    /// many again wait there, reading from the server waits. An item that does not decode ends the
    /// stream with its error.
    ///
    /// Every access returns the same stream. Read either it or the ``HubStream`` itself, not both.
    public var stream: AsyncThrowingStream<Element, any Error> {
        raw.pushedStream { try HubValueCoding.decode($0, as: Element.self) }
    }

    /// Stops the stream: the server is asked to cancel it and iteration ends.
    public func cancel() async { await raw.cancel() }

    /// How many times the reader (of the sequence or of ``stream``) was handed items, for tests of
    /// the hand-over.
    package var consumerWakeUps: Int { raw.consumerWakeUps }
    /// Whether a loop over the sequence waits for the next item now.
    package var isConsumerWaiting: Bool { raw.isConsumerWaiting }
}
