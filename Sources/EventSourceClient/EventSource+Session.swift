#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers
import NIOCore
import Logging
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore
import Tracing

extension EventSource {
    /// Opens one connection: RealtimeCore's event stream with the EventSource rules for the head
    /// (204 ends for good, any other status but 200 and any content type but `text/event-stream`
    /// fail), every event handed to the consumer's buffer on the connection's event loop, and the
    /// end reported by a callback (to the reconnect driver, as when the request cannot even start).
    func openStream(attemptHeaders: HTTPHeaders? = nil) {
        var headers = configuration.headers
        for (name, value) in attemptHeaders ?? [:] { headers.replaceOrAdd(name: name, value: value) }
        headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        headers.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        let lastEventId = state.withLockedValue { $0.lastEventId }
        if !lastEventId.isEmpty { headers.replaceOrAdd(name: "Last-Event-ID", value: lastEventId) }
        var request = HTTPRequestSpec(
            url: url.absoluteString, method: configuration.method, headers: headers, body: configuration.body,
            tls: configuration.tls, headTimeout: configuration.connectTimeout, cookies: configuration.cookies)
        let span = runtime.startClientSpan("realtime.connect", protocol: "sse", client: configuration.clientLabel)
        request.traceContext = span.context
        state.withLockedValue { $0.connectSpan = span }
        var options = EventStreamOptions(
            maxEventSize: configuration.maxEventSize,
            emitsComments: configuration.onComment != nil || configuration.includeComments,
            lastEventId: lastEventId,
            idleTimeout: configuration.idleTimeout)
        options.unnamedEventType = unnamedEventType
        let urlText = url.absoluteString
        let stream: EventStream
        do {
            stream = try EventStream.open(
                request, runtime: runtime, options: options, metrics: metrics,
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
                    self.opened()
                    return .accept
                },
                onOutputs: { outputs in self.receive(outputs) })
        } catch {
            span.fail(error)
            span.end()
            state.withLockedValue { $0.connectSpan = nil }
            driver.ended(.dropped(RealtimeError.wrap(error)))
            return
        }
        let registered = state.withLockedValue { state -> Bool in
            guard !state.closed else { return false }
            state.stream = stream
            return true
        }
        if !registered { stream.cancel() }
        buffer.setOnDemand { stream.resume() }
        stream.whenFinished { result in self.streamEnded(stream, result) }
    }

    /// The head was accepted (on the event loop): open, before any event of this response.
    private func opened() {
        let span = state.withLockedValue { state in
            defer { state.connectSpan = nil }
            return state.connectSpan
        }
        span?.addEvent("opened")
        span?.end()
        // A head accepted after close() (its request was on its way, or held by a stalled proxy,
        // when the source closed) opens nothing: the cancelled stream ends without a word.
        let closed = state.withLockedValue { state in
            state.unauthorizedRetried = false
            return state.closed
        }
        guard !closed else { return }
        driver.opened()
        setReadyState(.open)
        notifyOpen()
        _ = deliver(CollectionOfOne(.open))
    }

    /// The response ended (a callback on its event loop): the machine decides what comes next.
    private func streamEnded(_ stream: EventStream, _ result: Result<EventStreamEnd, any Error>) {
        let lastEventId = stream.lastEventId
        let bytes = stream.bytesReceived
        // A connection that never opened ends its span here.
        if let span = state.withLockedValue({ state in defer { state.connectSpan = nil }; return state.connectSpan }) {
            if case .failure(let error) = result { span.fail(error) }
            span.end()
        }
        let end = state.withLockedValue { state -> SessionEnd in
            if state.stream === stream { state.stream = nil }
            state.lastEventId = lastEventId
            state.bytesOfEndedStreams += bytes
            if state.restartRequested, !state.closed {
                state.restartRequested = false
                return .restart
            }
            if state.closed {
                // close() stopped the driver; a 204 ends it here.
                return .closed
            }
            switch result {
            case .success(.finishedAtHead):
                return .closed
            case .success(.ended):
                // A clean end of the body: reconnect after the reconnection time.
                return .dropped(RealtimeError(.connectionClosed, "the server ended the event stream"))
            case .failure(let error):
                return .dropped(RealtimeError.wrap(error))
            }
        }
        driver.ended(end)
    }

    /// One body part's outputs (on the event loop): callbacks first, then the consumer's buffer.
    /// Returns false when the consumer is `bufferSize` behind: reading pauses until it catches up.
    private func receive(_ outputs: [EventStream.Output]) -> Bool {
        let includeComments = configuration.includeComments
        let onComment = configuration.onComment
        var updates: [EventSourceUpdate] = []
        updates.reserveCapacity(outputs.count)
        var lastEventId: String?
        var events = 0
        for output in outputs {
            switch output {
            case .event(let event):
                events += 1
                lastEventId = event.lastEventId
                notifyEvent(event)
                updates.append(.event(event))
            case .retry(let milliseconds):
                state.withLockedValue { $0.reconnectionTime = .milliseconds(milliseconds) }
                reconnectionTimeForBackoff.withLockedValue { $0 = .milliseconds(milliseconds) }
            case .comment(let text):
                onComment?(text)
                if includeComments { updates.append(.comment(text)) }
            }
        }
        metrics.received(messages: events, bytes: 0)
        if let lastEventId {
            // An event arrived: this connection counts as stable for the reconnect count.
            state.withLockedValue { $0.lastEventId = lastEventId }
            driver.progressed()
        }
        return deliver(updates)
    }
}
