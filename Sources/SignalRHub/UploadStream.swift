import RealtimeCore
import NIOConcurrencyHelpers

/// A client-to-server stream argument: pass one among an invocation's arguments and its items go to
/// the server as they come (StreamItem messages), then its end (a Completion; an error the sequence
/// throws ends the stream with that error). The invocation carries the stream's id in `streamIds`
/// instead of a value.
///
/// ```swift
/// let lines = AsyncStream<String> { ... }
/// let count: Int = try await connection.invoke(method: "UploadLines", arguments: "log.txt", UploadStream(lines))
/// ```
public struct UploadStream: Encodable, Sendable {
    let pump: @Sendable (_ send: @escaping @Sendable (JSONValue) async throws -> Void) async throws -> Void

    /// Wraps `items`; each is encoded and sent as a stream item as it is produced, and the stream is
    /// completed when the sequence ends (with the error if it throws).
    public init<Items: AsyncSequence & Sendable>(_ items: Items) where Items.Element: Encodable & Sendable {
        pump = { send in
            for try await item in items { try await send(try HubValueCoding.encode(item)) }
        }
    }

    /// Upload streams are not values: `HubConnection` sends them by id. Encoding one elsewhere fails.
    public func encode(to encoder: any Encoder) throws {
        throw EncodingError.invalidValue(self, .init(codingPath: encoder.codingPath, debugDescription: "an UploadStream is sent by HubConnection as a stream, not encoded as a value"))
    }
}

extension HubConnection {
    /// Encodes invocation arguments, setting upload streams aside with fresh stream ids.
    func encodeArguments(_ arguments: [any Encodable]) throws -> (values: [JSONValue], streams: [(id: String, stream: UploadStream)]) {
        var values: [JSONValue] = []
        values.reserveCapacity(arguments.count)
        var streams: [(id: String, stream: UploadStream)] = []
        for argument in arguments {
            if let stream = argument as? UploadStream {
                let id = state.withLockedValue { $0.machine.nextId() }
                streams.append((id, stream))
            } else {
                values.append(try HubValueCoding.encode(argument))
            }
        }
        return (values, streams)
    }

    /// Sends each upload stream's items and its end, concurrently with waiting for the result.
    func startUploads(_ streams: [(id: String, stream: UploadStream)], on session: Session) {
        for (id, stream) in streams {
            // Unstructured: an upload runs beside its invocation, which the caller awaits; it ends
            // with the stream or with the connection.
            Task {
                do {
                    try await stream.pump { item in
                        try await self.transmit(.streamItem(HubStreamItem(invocationId: id, item: item)), on: session)
                    }
                    try await self.transmit(.completion(HubCompletion(invocationId: id, outcome: .void)), on: session)
                } catch {
                    // The server learns why the stream ended; a dead connection fails the invocation itself.
                    try? await self.transmit(.completion(HubCompletion(invocationId: id, outcome: .error("\(error)"))), on: session)
                }
            }
        }
    }
}
