import InMemoryTracing
import RealtimeCore
import RealtimeTesting
import SpreadbotClient
import Testing
import Tracing

/// A Spreadbot connection's span lists the transports it tried and the fallbacks; a REST call is a
/// `realtime.rest` span with its method, path and status.
@Suite(.timeLimit(.minutes(1))) struct SpreadbotTracingTests {
    @Test func connectFallbackAndRESTSpans() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.refuseWebSocket()
        server.setResource("/account", json: #"{"plan":"free"}"#)
        let tracer = InMemoryTracer()
        let client = Spreadbot(configuration: spreadbotConfiguration(server, runtime: RealtimeRuntime(tracer: tracer)))
        client.establishConnection(path: "room")
        await eventually("connected") { client.state == .connected }
        _ = try await client.rest.getData(path: "account")
        client.closeConnection()
        let spans = tracer.finishedSpans
        let connect = try #require(spans.first { $0.operationName == "realtime.connect" })
        #expect(connect.events.map(\.name) == ["transport", "fallback", "transport"])
        let rest = try #require(spans.first { $0.operationName == "realtime.rest" })
        #expect(rest.attributes["realtime.path"]?.toSpanAttribute() == "account")
        #expect(rest.attributes["http.response.status_code"]?.toSpanAttribute() == 200)
    }
}
