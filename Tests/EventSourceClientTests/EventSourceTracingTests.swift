import EventSourceClient
import Foundation
import InMemoryTracing
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing
import Tracing

/// Each connection of an EventSource is a `realtime.connect` span, ended when its head is accepted
/// (or with the error it failed with), and its request carries the span's propagation headers.
@Suite(.timeLimit(.minutes(1))) struct EventSourceTracingTests {
    @Test func connectSpansAndPropagation() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let calls = NIOLockedValueBox(0)
        server.route("/events") { _ in
            calls.withLockedValue { $0 += 1; return $0 } == 1
                ? .text("not yet", status: 503)
                : .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: hi\n\n")))
        }
        let tracer = InMemoryTracer()
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!,
            configuration: fastConfiguration { $0.shouldRetry = { _ in true } },
            runtime: RealtimeRuntime(tracer: tracer))
        var iterator = source.events.makeAsyncIterator()
        #expect(try await iterator.next()?.data == "hi")
        source.close()
        let connects = tracer.finishedSpans.filter { $0.operationName == "realtime.connect" }
        #expect(connects.count >= 2)
        #expect(connects.first?.status?.code == .error, "the 503")
        #expect(connects.dropFirst().first?.events.map(\.name) == ["opened"])
        let sent = server.requests(to: "/events").map { $0.headers[InMemoryTracer.traceIDKey] }
        #expect(sent.prefix(2) == connects.prefix(2).map { Optional($0.traceID) }[...])
    }
}
