import EventSourceClient
import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub
import SocketIOEngine
import Testing

/// Every plain-http transport through squid with Debian's stock rules (`http_access deny CONNECT
/// !SSL_ports`, SSL_ports = 443): they go in absolute-form, as curl sends them, so the proxy passes
/// them to a server on a high port, and its access log shows each. Before, every one was tunnelled
/// with `CONNECT` and refused with 403.
@Suite(.serialized, .timeLimit(.minutes(3))) struct SquidProxyTests {
    func runtime(_ squid: ProxyProcess) -> RealtimeRuntime {
        var runtime = RealtimeRuntime()
        runtime.proxy = squid.configuration
        return runtime
    }

    @Test func anEventSourceStreamsThroughSquid() async throws {
        let squid = try await ProxyProcess.start(.squid)
        defer { Task { await squid.stop() } }
        let sse = try await SSETestServer.start()
        defer { Task { await sse.stop() } }
        let source = EventSource(
            url: URL(string: sse.url)!,
            configuration: EventSourceConfiguration(reconnectionTime: .milliseconds(10), randomizationFactor: 0, reachability: AlwaysReachable()),
            runtime: runtime(squid))
        let first = Task {
            var iterator = source.events.makeAsyncIterator()
            return try await iterator.next()?.data
        }
        try await waitUntil("the stream open through squid") { sse.openStreams == 1 }
        _ = sse.publish("through squid")
        #expect(try await first.value == "through squid")
        source.close()
        try await squid.waitForTarget(port: sse.port)
        #expect(squid.log.contains("GET http://127.0.0.1:\(sse.port)/events"), "\(squid.log)")
        #expect(!squid.log.contains("TCP_DENIED"), "\(squid.log)")
    }

    @Test func socketIOPollsThroughSquid() async throws {
        let squid = try await ProxyProcess.start(.squid)
        defer { Task { await squid.stop() } }
        let server = try await SocketIOTestServer.start()
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = [.polling]
        configuration.engine.upgrade = false
        configuration.engine.connectTimeout = .seconds(30)
        configuration.reachability = AlwaysReachable()
        configuration.runtime = runtime(squid)
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", arguments: ["over polling"], timeout: .seconds(30)) == ["over polling"])
        #expect(manager.transport == .polling)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
        try await waitUntil("squid logging the polls") {
            squid.log.contains("GET http://127.0.0.1:\(server.port)/socket.io/") && squid.log.contains("POST http://127.0.0.1:\(server.port)/socket.io/")
        }
        #expect(!squid.log.contains("TCP_DENIED"), "\(squid.log)")
    }

    @Test func signalRNegotiatesAndLongPollsThroughSquid() async throws {
        let squid = try await ProxyProcess.start(.squid)
        defer { Task { await squid.stop() } }
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .longPolling).withRuntime(runtime(squid)).build()
        try await connection.start()
        let echoed: String = try await connection.invoke(method: "echo", arguments: "through squid")
        #expect(echoed == "through squid")
        await connection.stop()
        #expect(server.transportsUsed == ["LongPolling"])
        try await waitUntil("squid logging negotiate and the polls") {
            let log = squid.log
            return log.contains("POST http://127.0.0.1:\(server.port)/") && log.contains("/negotiate") && log.contains("GET http://127.0.0.1:\(server.port)/")
        }
        #expect(!squid.log.contains("TCP_DENIED"), "\(squid.log)")
    }
}
