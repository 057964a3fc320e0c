public import RealtimeCore

/// A server-to-client stream, as the official Swift client shapes it.
public protocol StreamResult<Element>: Sendable {
    associatedtype Element: Sendable
    /// The items, in order; ends with the server's completion and throws its error.
    var stream: AsyncThrowingStream<Element, any Error> { get }
    /// Stops the stream: sends CancelInvocation and ends the sequence.
    func cancel() async
}

/// A stream's raw items. Reading happens through a bounded buffer: when the consumer is slow, the
/// connection stops reading from the server once `streamBufferSize` items wait.
public struct HubRawStream: AsyncSequence, Sendable {
    public typealias Element = JSONValue
    let buffer: AsyncBoundedBuffer<JSONValue>
    let cancelAction: @Sendable () async -> Void

    init(buffer: AsyncBoundedBuffer<JSONValue>, cancel: @escaping @Sendable () async -> Void) {
        self.buffer = buffer
        cancelAction = cancel
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let buffer: AsyncBoundedBuffer<JSONValue>
        public mutating func next() async throws -> JSONValue? { try await buffer.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(buffer: buffer) }

    /// Sends CancelInvocation (when the stream is still running) and ends the sequence.
    public func cancel() async { await cancelAction() }
}

struct HubStream<Element: Decodable & Sendable>: StreamResult {
    let raw: HubRawStream

    var stream: AsyncThrowingStream<Element, any Error> {
        let raw = raw
        return AsyncThrowingStream(unfolding: {
            guard let value = try await raw.buffer.next() else { return nil }
            return try HubValueCoding.decode(value, as: Element.self)
        })
    }

    func cancel() async { await raw.cancel() }
}
