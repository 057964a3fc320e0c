#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers
import NIOCore
import Logging
import NIOHTTP1
import RealtimeCore

extension EventSource {
    /// One connection: request, check status and content type, parse until the body ends.
    func session(_ context: ReconnectDriver<Never>.SessionContext) async throws -> SessionEnd {
        var headers = configuration.headers
        headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        headers.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        let lastEventId = state.withLockedValue { $0.lastEventId }
        if !lastEventId.isEmpty { headers.replaceOrAdd(name: "Last-Event-ID", value: lastEventId) }
        let request = HTTPRequestSpec(
            url: url.absoluteString, method: configuration.method, headers: headers, body: configuration.body,
            tls: configuration.tls, headTimeout: configuration.connectTimeout, idleTimeout: configuration.idleTimeout)
        let urlText = url.absoluteString
        do {
            return try await HTTPTransport.stream(request, runtime: runtime) { head, body in
                self.state.withLockedValue { $0.lastStatus = Int(head.status.code) }
                if head.status == .noContent {
                    // The server's way to say "stop reconnecting".
                    self.state.withLockedValue { $0.closed = true }
                    return .closed
                }
                guard head.status == .ok else {
                    var excerpt = ""
                    for try await chunk in body {
                        excerpt += String(buffer: chunk)
                        if excerpt.utf8.count >= 512 { break }
                    }
                    throw RealtimeError.badStatus(head.status, url: urlText, body: excerpt)
                }
                guard head.mediaType == "text/event-stream" else {
                    throw RealtimeError(
                        .badContentType,
                        "expected Content-Type text/event-stream, got \(head.headers.first(name: "content-type") ?? "none")",
                        status: head.status)
                }
                try await context.connected { (never: Never) in }
                self.setReadyState(.open)
                self.notifyOpen()
                if self.hasConsumer { await body.pausingIdleTimeout { await self.buffer.send(.open) } }
                return try await self.consume(body)
            }
        } catch let error as RealtimeError where error.code == .timeout {
            return .dropped(error)
        }
    }

    private func consume(_ body: HTTPBodyChunks) async throws -> SessionEnd {
        let includeComments = configuration.includeComments
        var parser = SSEParser(
            configuration: .init(maxEventSize: configuration.maxEventSize, emitsComments: configuration.onComment != nil || includeComments),
            lastEventId: state.withLockedValue { $0.lastEventId })
        let onComment = configuration.onComment
        defer {
            parser.finish()
            let lastEventId = parser.lastEventId
            state.withLockedValue { $0.lastEventId = lastEventId }
        }
        // The outputs of one chunk, kept to be handed on after the parser returns (handing on may wait).
        var outputs: [SSEParser.Output] = []
        for try await chunk in body {
            runtime.logger.trace("event stream chunk", metadata: ["realtime.bytes": "\(chunk.readableBytes)"])
            outputs.removeAll(keepingCapacity: true)
            try parser.parse(chunk) { outputs.append($0) }
            for output in outputs {
                let update: EventSourceUpdate?
                switch output {
                case .event(let event):
                    state.withLockedValue { $0.lastEventId = event.lastEventId }
                    notifyEvent(event)
                    update = .event(event)
                case .retry(let milliseconds):
                    state.withLockedValue { $0.reconnectionTime = .milliseconds(milliseconds) }
                    update = nil
                case .comment(let text):
                    onComment?(text)
                    update = includeComments ? .comment(text) : nil
                }
                guard let update, hasConsumer else { continue }
                if buffer.isFull {
                    // The consumer is behind: stop reading until it catches up (backpressure).
                    await body.pausingIdleTimeout { await buffer.send(update) }
                } else {
                    await buffer.send(update)
                }
            }
            if state.withLockedValue({ $0.closed }) { return .closed }
            try Task.checkCancellation()
        }
        // A clean end of the body: reconnect after the reconnection time.
        runtime.logger.debug("event stream ended by the server")
        return .dropped(RealtimeError(.connectionClosed, "the server ended the event stream"))
    }
}
