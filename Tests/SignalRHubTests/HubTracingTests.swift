import InMemoryTracing
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing
import Tracing

/// The connect span (negotiate, the transports tried, the fallback, the handshake as events), the
/// invocation span ended by its result, and the span's propagation headers on every request the
/// client makes, as the server saw them (the in-memory tracer's headers; a W3C tracer writes
/// `traceparent` in the same place).
@Suite(.timeLimit(.minutes(1))) struct HubTracingTests {
    @Test func connectAndInvokeSpansAndPropagation() async throws {
        var serverOptions = SignalRTestServer.Options()
        serverOptions.recordedHeader = InMemoryTracer.traceIDKey
        serverOptions.failingTransports = ["WebSockets"]
        let server = try await SignalRTestServer.start(options: serverOptions)
        defer { Task { await server.stop() } }
        let tracer = InMemoryTracer()
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: [.webSockets, .longPolling])
            .withRuntime(RealtimeRuntime(tracer: tracer)).build()
        try await connection.start()
        let sum: Int = try await connection.invoke(method: "add", arguments: 1, 2)
        #expect(sum == 3)
        await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "fail", arguments: "no") }
        await connection.stop()

        let spans = tracer.finishedSpans
        let connect = try #require(spans.first { $0.operationName == "realtime.connect" })
        #expect(connect.events.map(\.name) == ["negotiate", "transport", "fallback", "negotiate", "transport", "handshake"])
        #expect(connect.attributes["realtime.protocol"]?.toSpanAttribute() == "signalr")
        let invokes = spans.filter { $0.operationName == "realtime.invoke" }
        #expect(invokes.count == 2)
        #expect(invokes.first?.status == nil)
        #expect(invokes.last?.status?.code == .error, "ended by the hub's error")
        // Every request of the connect (both negotiates, the refused upgrade, the polls, the
        // handshake's POST) carried the connect span's trace id; each invocation's POST its own.
        let recorded = server.recordedHeaders
        let invocationPOSTs = recorded.filter { $0.request == "POST" }.dropFirst()
        let connectRequests = recorded.filter { $0.request != "DELETE" && !($0.request == "POST" && $0.value != connect.traceID) }
        #expect(recorded.filter { $0.request == "negotiate" }.count == 2)
        #expect(recorded.contains { $0.request == "upgrade" })
        #expect(connectRequests.allSatisfy { $0.value == connect.traceID }, "\(recorded)")
        #expect(invocationPOSTs.map(\.value) == invokes.map { Optional($0.traceID) }, "\(recorded)")
    }
}
