import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import RealtimeBridge
import RealtimeCore
import RealtimeTesting
import ServiceLifecycle
import SocketIOEngine
import SpreadbotClient

/// The example service (Examples/RealtimeBridge) as the demo's last step: an SSE stream, a
/// Socket.IO namespace and a SignalR hub forwarded to a Spreadbot path, in one ServiceGroup.
enum BridgeDemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("Example service: SSE + Socket.IO + SignalR forwarded to Spreadbot in one ServiceGroup, /metrics, graceful stop", bridge),
    ]

    static func bridge() async throws {
        let sse = try await SSETestServer.start()
        let socketIO = try await SocketIOTestServer.start()
        let signalR = try await SignalRTestServer.start()
        let spreadbot = try await SpreadbotTestServer.start()
        DemoCleanup.after {
            await sse.stop()
            await socketIO.stop()
            await signalR.stop()
            await spreadbot.stop()
        }
        var configuration = BridgeConfiguration(
            eventStreamURL: URL(string: sse.url)!, socketIOURL: socketIO.url, signalRURL: signalR.url,
            spreadbot: SpreadbotConfiguration(baseURL: spreadbot.baseURL, accessToken: spreadbot.options.accessToken))
        configuration.metricsPort = 0
        let quiet = Logger(label: "bridge") { _ in SwiftLogNoOpLogHandler() }
        let bridge = Bridge(configuration: configuration, logger: quiet)
        let group = ServiceGroup(configuration: .init(services: bridge.services.map { .init(service: $0) }, logger: quiet))
        // The service group runs beside the checks below, which end it and await it (`running.value`).
        let running = Task { try await group.run() }
        try await waitUntil("every client connected", limit: .seconds(20)) {
            sse.openStreams == 1 && bridge.socket.status == .connected && signalR.connectionCount == 1 && spreadbot.streamCount == 1
        }
        say("   connected: SSE, Socket.IO, SignalR, and Spreadbot (\(bridge.spreadbot.transport.map { "\($0)" } ?? "?"))")
        for index in 1...3 {
            sse.publish("price \(index)")
            socketIO.broadcast("message", [.string("chat \(index)")])
            await signalR.broadcast("ReceiveMessage", [.string("alert \(index)")])
        }
        try await waitUntil("9 messages at the Spreadbot server") { spreadbot.received(on: "bridge").count >= 9 }
        for message in spreadbot.received(on: "bridge") { say("   spreadbot got \(message)") }
        let port = await bridge.metricsPort()
        let response = try await HTTPClient.shared.get(url: "http://127.0.0.1:\(port)/metrics").get()
        let metrics = response.body.map { String(buffer: $0) } ?? ""
        for line in metrics.split(separator: "\n") where line.hasPrefix("realtime_messages_received_total{") || line.hasPrefix("bridge_forwarded_total") {
            say("   /metrics: \(line)")
        }
        let stopping = ContinuousClock.now
        await group.triggerGracefulShutdown()
        try await running.value
        let counts = bridge.counts
        say("   stopped in \(ContinuousClock.now - stopping): accepted \(counts.accepted), delivered \(counts.delivered), failed \(counts.failed)")
        guard counts.delivered == 9, counts.failed == 0 else { throw RealtimeError(.protocolViolation, "the bridge lost messages: \(counts)") }
    }
}
