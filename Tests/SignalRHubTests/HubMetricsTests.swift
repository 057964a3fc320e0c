import MetricsTestKit
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// Every metric Docs/Metrics.md promises for a hub connection moves: attempts, open, messages and
/// bytes both ways, the invocation's duration, a drop by its code and the reconnect.
@Suite(.timeLimit(.minutes(1))) struct HubMetricsTests {
    @Test func invokeDropAndReconnect() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let metrics = TestMetrics()
        let probe = MetricsProbe(metrics, protocol: "signalr")
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withAutomaticReconnect([0]).withRuntime(RealtimeRuntime(metricsFactory: metrics)).build()
        let reconnected = Recorder<Int>()
        connection.onReconnected { reconnected.append(1) }
        try await connection.start()
        let sum: Int = try await connection.invoke(method: "add", arguments: 2, 3)
        #expect(sum == 5)
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        #expect(probe.counter(ClientMetrics.messagesSentLabel) >= 1)
        #expect(probe.counter(ClientMetrics.bytesSentLabel) > 0)
        #expect(probe.counter(ClientMetrics.messagesReceivedLabel) >= 1)
        #expect(probe.counter(ClientMetrics.bytesReceivedLabel) > 0)
        #expect(probe.timerCount(ClientMetrics.callDurationLabel) == 1)
        await server.dropAll()
        _ = try await reconnected.wait(count: 1)
        #expect(probe.counter(ClientMetrics.connectionAttemptsLabel) == 2)
        #expect(probe.counter(ClientMetrics.reconnectsLabel) == 1)
        #expect(probe.counter(ClientMetrics.connectionFailuresLabel) == 1)
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        await connection.stop()
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 0)
    }
}
