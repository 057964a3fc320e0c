import Foundation
import Logging
import RealtimeCore
import RealtimeTesting
import ServiceLifecycle
import SignalRHub
import SocketIOEngine
import SpreadbotClient
import Testing

/// A client connected from inside some service's run() belongs to itself: that service's graceful
/// shutdown does not close its WebSocket (swift-websocket closes a WebSocket when the graceful
/// shutdown of the task it runs in begins; the clients' connections used to run in tasks that
/// inherited it, and every reconnect after it was closed at once).
@Suite(.timeLimit(.minutes(1))) struct ServiceIsolationTests {
    /// Connects the clients in its run(), then waits for its shutdown.
    struct Starter: Service {
        let hub: HubConnection
        let socket: SocketIOClient
        let spreadbot: Spreadbot

        func run() async throws {
            try await hub.start()
            try await socket.connect()
            spreadbot.establishConnection(path: "feed")
            try await gracefulShutdown()
        }
    }

    @Test func anotherServicesShutdownLeavesConnectionsOpen() async throws {
        let servers = try await BridgeTests.Servers.start()
        let hub = HubConnectionBuilder().withUrl(url: servers.signalR.url).build()
        let manager = SocketManager(url: servers.socketIO.url)
        let socket = manager.defaultSocket
        let spreadbot = Spreadbot(configuration: SpreadbotConfiguration(baseURL: servers.spreadbot.baseURL, accessToken: "access-0"))
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: Starter(hub: hub, socket: socket, spreadbot: spreadbot))],
            logger: Logger(label: "group") { _ in SwiftLogNoOpLogHandler() }))
        let running = Task { try await group.run() }
        try await waitUntil("all connected") {
            hub.currentState == .connected && socket.status == .connected && spreadbot.state == .connected
        }
        await group.triggerGracefulShutdown()
        try await running.value

        // Each connection still carries messages both ways after the starter stopped.
        let echoed: String = try await hub.invoke(method: "echo", arguments: "after")
        #expect(echoed == "after")
        let ack = try await socket.emitWithAck("echo", arguments: ["after"])
        #expect(ack.first?.stringValue == "after")
        try await spreadbot.send("after")
        try await waitUntil("the Spreadbot server has the send") { servers.spreadbot.received(on: "feed") == [.text("after")] }
        #expect(servers.signalR.handshakeCount == 1 && servers.socketIO.sessionCount == 1, "nothing reconnected")
        #expect(hub.currentState == .connected && socket.status == .connected && spreadbot.state == .connected)

        await hub.stop()
        manager.disconnect()
        spreadbot.closeConnection()
        await servers.stop()
    }
}
