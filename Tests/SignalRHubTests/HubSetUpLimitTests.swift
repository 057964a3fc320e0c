import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// `HTTPConnectionOptions.maxConnectingPerHost` for SignalR: a start (or a reconnect) waits its turn
/// before its negotiate, and holds the slot through negotiate, WebSocket and handshake (the
/// WebSocket it opens does not wait again); `stop()` withdraws a waiting start.
@Suite(.timeLimit(.minutes(2)))
struct HubSetUpLimitTests {
    @Test("starts to one host set up maxConnectingPerHost at a time; stop() withdraws a waiting one")
    func startsWaitTheirTurn() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        proxy.hold(.targetToClient)
        // A minute to connect: a loaded machine, and no timeout is under test here.
        let runtime = RealtimeRuntime(http: HTTPConnectionOptions(connectTimeout: .seconds(60), maxConnectingPerHost: 2), proxy: .none)
        let host = "127.0.0.1:\(proxy.port)"
        let connections = (0..<5).map { _ in
            HubConnectionBuilder().withUrl(url: proxy.url() + "/hub", transport: .webSockets).withRuntime(runtime).build()
        }
        func start(_ connection: HubConnection) -> Task<String, Never> {
            Task {
                do {
                    try await connection.start()
                    return "started"
                } catch let error as RealtimeError { return "\(error.code)" } catch { return "\(error)" }
            }
        }
        let first = connections.prefix(2).map(start)
        try await waitUntil("two starts hold the slots") { runtime.setUpLimiter.counts(host: host) == (2, 0) }
        let later = connections.suffix(3).map(start)
        try await waitUntil("three wait") { runtime.setUpLimiter.counts(host: host) == (2, 3) }
        // The last one is stopped while it waits: its start ends, unconnected, and it leaves the line.
        await connections[4].stop()
        #expect(await later[2].value != "started")
        #expect(runtime.setUpLimiter.counts(host: host) == (2, 2))
        proxy.resume()
        for task in first + later.prefix(2) { let value = await task.value; #expect(value == "started") }
        #expect(server.handshakeCount == 4)
        #expect(runtime.setUpLimiter.counts(host: host) == (0, 0))
        for connection in connections { await connection.stop() }
    }
}
