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
    /// One connection: RealtimeCore's event stream with the EventSource rules for the head (204 ends
    /// for good, any other status but 200 and any content type but `text/event-stream` fail), and
    /// every event handed to the consumer's buffer on the connection's event loop.
    func session(_ context: ReconnectDriver<Never>.SessionContext) async throws -> SessionEnd {
        var headers = configuration.headers
        headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        headers.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        let lastEventId = state.withLockedValue { $0.lastEventId }
        if !lastEventId.isEmpty { headers.replaceOrAdd(name: "Last-Event-ID", value: lastEventId) }
        let request = HTTPRequestSpec(
            url: url.absoluteString, method: configuration.method, headers: headers, body: configuration.body,
            tls: configuration.tls, headTimeout: configuration.connectTimeout)
        let options = EventStreamOptions(
            maxEventSize: configuration.maxEventSize,
            emitsComments: configuration.onComment != nil || configuration.includeComments,
            lastEventId: lastEventId,
            idleTimeout: configuration.idleTimeout)
        let urlText = url.absoluteString
        let stream = try EventStream.open(
            request, runtime: runtime, options: options,
            onHead: { head in
                self.state.withLockedValue { $0.lastStatus = Int(head.status.code) }
                if head.status == .noContent {
                    // The server's way to say "stop reconnecting".
                    self.state.withLockedValue { $0.closed = true }
                    return .finish
                }
                guard head.status == .ok else {
                    let status = head.status
                    return .refuse { excerpt in RealtimeError.badStatus(status, url: urlText, body: excerpt) }
                }
                guard head.mediaType == "text/event-stream" else {
                    let error = RealtimeError(
                        .badContentType,
                        "expected Content-Type text/event-stream, got \(head.headers.first(name: "content-type") ?? "none")",
                        status: head.status)
                    return .refuse { _ in error }
                }
                self.opened(context)
                return .accept
            },
            onOutputs: { outputs in self.receive(outputs, context) })
        let registered = state.withLockedValue { state -> Bool in
            guard !state.closed, !state.restartRequested else { return false }
            state.stream = stream
            return true
        }
        if !registered { stream.cancel() }
        buffer.setOnDemand { stream.resume() }
        defer {
            let lastEventId = stream.lastEventId
            let bytes = stream.bytesReceived
            state.withLockedValue { state in
                state.stream = nil
                state.lastEventId = lastEventId
                state.bytesOfEndedStreams += bytes
            }
        }
        let end: EventStreamEnd
        do {
            end = try await stream.finished()
        } catch is CancellationError {
            let (closed, restart) = state.withLockedValue { ($0.closed, $0.restartRequested) }
            if closed { return .closed }
            if restart { return .restart }
            throw CancellationError()
        } catch let error as RealtimeError where error.code == .timeout {
            return .dropped(error)
        }
        if state.withLockedValue({ $0.closed }) { return .closed }
        if case .finishedAtHead = end { return .closed }
        // A clean end of the body: reconnect after the reconnection time.
        runtime.logger.debug("event stream ended by the server")
        return .dropped(RealtimeError(.connectionClosed, "the server ended the event stream"))
    }

    /// The head was accepted (on the event loop): open, before any event of this response.
    private func opened(_ context: ReconnectDriver<Never>.SessionContext) {
        context.connected()
        setReadyState(.open)
        notifyOpen()
        if hasConsumer { buffer.yield(.open) }
    }

    /// One body part's outputs (on the event loop): callbacks first, then the consumer's buffer.
    /// Returns false when the consumer is `bufferSize` behind: reading pauses until it catches up.
    private func receive(_ outputs: [EventStream.Output], _ context: ReconnectDriver<Never>.SessionContext) -> Bool {
        let includeComments = configuration.includeComments
        let onComment = configuration.onComment
        var updates: [EventSourceUpdate] = []
        updates.reserveCapacity(outputs.count)
        var lastEventId: String?
        for output in outputs {
            switch output {
            case .event(let event):
                lastEventId = event.lastEventId
                notifyEvent(event)
                updates.append(.event(event))
            case .retry(let milliseconds):
                state.withLockedValue { $0.reconnectionTime = .milliseconds(milliseconds) }
            case .comment(let text):
                onComment?(text)
                if includeComments { updates.append(.comment(text)) }
            }
        }
        if let lastEventId {
            state.withLockedValue { $0.lastEventId = lastEventId }
            // An event arrived: this connection counts as stable for the reconnect count.
            context.progressed()
        }
        guard hasConsumer, !updates.isEmpty else { return true }
        return buffer.yield(contentsOf: updates)
    }
}
