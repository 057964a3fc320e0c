@_spi(RealtimeEngine) public import RealtimeCore
import NIOConcurrencyHelpers

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

    init(buffer: InboundBuffer<JSONValue>, cancel: @escaping @Sendable () async -> Void) {
        self.buffer = buffer
        cancelAction = cancel
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

    /// The items as the official client's `AsyncThrowingStream`. Iterating the ``HubStream`` itself
    /// is cheaper on an actor: this stream's closure runs off the caller's actor for every item.
    public var stream: AsyncThrowingStream<Element, any Error> {
        // The sequence's one consumer calls the closure serially; the box only makes that visible
        // to the compiler.
        let iterator = NIOLockedValueBox(InboundBuffer.Iterator(raw.buffer))
        return AsyncThrowingStream(unfolding: {
            var local = iterator.withLockedValue { $0 }
            defer { iterator.withLockedValue { $0 = local } }
            // An item of the read under way is taken without an async call (each switches
            // executors in this closure); the next read's is waited for.
            if let value = local.nextBuffered() { return try HubValueCoding.decode(value, as: Element.self) }
            guard let value = try await local.next() else { return nil }
            return try HubValueCoding.decode(value, as: Element.self)
        })
    }

    /// Stops the stream: the server is asked to cancel it and iteration ends.
    public func cancel() async { await raw.cancel() }

    /// How many times the reader (of the sequence or of ``stream``) was handed items, for tests of
    /// the hand-over.
    package var consumerWakeUps: Int { raw.consumerWakeUps }
    /// Whether a loop over the sequence waits for the next item now.
    package var isConsumerWaiting: Bool { raw.isConsumerWaiting }
}
