import MetricsTestKit
import RealtimeCore
import RealtimeTesting
import SpreadbotClient
import Testing

/// Every metric Docs/Metrics.md promises for a Spreadbot client moves: attempts, open, messages and
/// bytes both ways, the send queue's depth, and the sends a close drops.
@Suite(.timeLimit(.minutes(1))) struct SpreadbotMetricsTests {
    @Test func sendsMessagesAndAClose() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let metrics = TestMetrics()
        let probe = MetricsProbe(metrics, protocol: "spreadbot")
        var configuration = spreadbotConfiguration(server, runtime: RealtimeRuntime(metricsFactory: metrics))
        configuration.reconnectDelay = .seconds(60)
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        // Queued before connecting.
        let early = try client.enqueue(.text("early"))
        #expect(probe.meter(ClientMetrics.sendQueueDepthLabel) == 1)
        client.establishConnection(path: "room")
        try await early.delivered()
        server.publish("news", to: "room")
        await eventually("news") { recorder.texts == ["news"] }
        #expect(probe.counter(ClientMetrics.connectionAttemptsLabel) == 1)
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        #expect(probe.counter(ClientMetrics.messagesSentLabel) == 1)
        #expect(probe.counter(ClientMetrics.bytesSentLabel) == 5)
        #expect(probe.counter(ClientMetrics.messagesReceivedLabel) == 1)
        #expect(probe.counter(ClientMetrics.bytesReceivedLabel) == 4)
        #expect(probe.meterValues(ClientMetrics.sendQueueDepthLabel).last == 0)
        // A drop, and sends waiting for the reconnect (a minute away) when the client closes.
        server.refuseWebSocket()
        server.refuseEventStream()
        server.dropStreams()
        await eventually("reconnecting") { client.state == .connecting }
        _ = try client.enqueue(.text("late 1"))
        _ = try client.enqueue(.text("late 2"))
        client.closeConnection()
        #expect(probe.counter(ClientMetrics.messagesDroppedLabel, [("reason", "closed")]) == 2)
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 0)
    }
}
