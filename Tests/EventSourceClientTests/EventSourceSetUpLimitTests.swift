import EventSourceClient
import Foundation
import RealtimeCore
import RealtimeTesting
import Testing

/// `HTTPConnectionOptions.maxConnectingPerHost` for event streams: an EventSource waits its turn
/// among the set-ups to its host without a task, within its connect timeout, and gives its slot
/// back once the response head is decided.
@Suite(.timeLimit(.minutes(2)))
struct EventSourceSetUpLimitTests {
    /// Six streams started at once through a proxy that holds the server's answers: with a bound of
    /// 2 the proxy sees two connections until their heads are let through; one closed while in
    /// line leaves it and never connects; the other five open.
    @Test("streams to one host are set up maxConnectingPerHost at a time (seen from the proxy)")
    func setUpsWaitTheirTurn() async throws {
        let server = try await SSETestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        proxy.hold(.targetToClient)
        let runtime = RealtimeRuntime(http: HTTPConnectionOptions(maxConnectingPerHost: 2), proxy: .none)
        let host = "127.0.0.1:\(proxy.port)"
        let url = URL(string: proxy.url() + "/events")!
        // A minute to open: a loaded machine, and the connect timeout is not under test here.
        let sources = (0..<6).map { _ in EventSource(url: url, configuration: fastConfiguration { $0.connectTimeout = .seconds(60) }, runtime: runtime) }
        let readers = sources.map { source in Task { for try await _ in source.updates {} } }
        defer { for reader in readers { reader.cancel() } }
        try await waitUntil("two set-ups reached the proxy, four wait") {
            proxy.statistics.connectionsAccepted == 2 && runtime.setUpLimiter.counts(host: host) == (2, 4)
        }
        // The last in line is closed: it leaves the line.
        sources[5].close()
        #expect(runtime.setUpLimiter.counts(host: host) == (2, 3))
        // Sampled: no third connection is made while the two heads are held.
        try await Task.sleep(for: .milliseconds(300))
        #expect(proxy.statistics.connectionsAccepted == 2)
        proxy.resume()
        try await waitUntil("five streams open") { sources.prefix(5).allSatisfy { $0.readyState == .open } }
        #expect(proxy.statistics.connectionsAccepted == 5)
        #expect(server.openStreams == 5)
        #expect(sources[5].readyState == .closed)
        #expect(runtime.setUpLimiter.counts(host: host) == (0, 0))
        for source in sources { source.close() }
    }

    /// The connect timeout covers the wait for a turn: a stream still in line when it passes fails
    /// with the timeout (a reconnect follows, by the reconnect rules) and has not reached the server.
    @Test("a stream still waiting its turn at the connect timeout fails with it, unconnected")
    func waiterTimesOut() async throws {
        let server = try await SSETestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        proxy.hold(.targetToClient)
        let runtime = RealtimeRuntime(http: HTTPConnectionOptions(maxConnectingPerHost: 1), proxy: .none)
        let host = "127.0.0.1:\(proxy.port)"
        let url = URL(string: proxy.url() + "/events")!
        let first = EventSource(url: url, configuration: fastConfiguration { $0.connectTimeout = .seconds(60) }, runtime: runtime)
        let firstReader = Task { for try await _ in first.updates {} }
        defer { firstReader.cancel(); first.close() }
        try await waitUntil("the first set-up reached the proxy") { proxy.statistics.connectionsAccepted == 1 }
        let second = EventSource(url: url, configuration: fastConfiguration {
            $0.connectTimeout = .seconds(1)
            $0.maxReconnectAttempts = 0
        }, runtime: runtime)
        let error = await #expect(throws: RealtimeError.self) { for try await _ in second.events {} }
        #expect(error?.code == .timeout || (error?.underlying as? RealtimeError)?.code == .timeout, "\(String(describing: error))")
        #expect("\(String(describing: error))".contains("no response from"), "\(String(describing: error))")
        #expect(proxy.statistics.connectionsAccepted == 1)
        #expect(runtime.setUpLimiter.counts(host: host) == (1, 0))
        proxy.resume()
        try await waitUntil("the first stream opens") { first.readyState == .open }
        #expect(runtime.setUpLimiter.counts(host: host) == (0, 0))
    }
}
