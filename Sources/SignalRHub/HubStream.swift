public import RealtimeCore
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
    public typealias Element = JSONValue
    let buffer: InboundBuffer<JSONValue>
    let cancelAction: @Sendable () async -> Void

    init(buffer: InboundBuffer<JSONValue>, cancel: @escaping @Sendable () async -> Void) {
        self.buffer = buffer
        cancelAction = cancel
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: InboundBuffer<JSONValue>.Iterator
        public mutating func next() async throws -> JSONValue? { try await base.next(isolation: nil) }
        /// The next item, in the caller's isolation (no hop off the caller's actor per item).
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> JSONValue? {
            try await base.next(isolation: actor)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: InboundBuffer.Iterator(buffer)) }

    /// Sends CancelInvocation (when the stream is still running) and ends the sequence.
    public func cancel() async { await cancelAction() }
}

struct HubStream<Element: Decodable & Sendable>: StreamResult {
    let raw: HubRawStream

    var stream: AsyncThrowingStream<Element, any Error> {
        // The sequence's one consumer calls the closure serially; the box only makes that visible
        // to the compiler.
        let iterator = NIOLockedValueBox(InboundBuffer.Iterator(raw.buffer))
        return AsyncThrowingStream(unfolding: {
            var local = iterator.withLockedValue { $0 }
            defer { iterator.withLockedValue { $0 = local } }
            guard let value = try await local.next() else { return nil }
            return try HubValueCoding.decode(value, as: Element.self)
        })
    }

    func cancel() async { await raw.cancel() }
}
