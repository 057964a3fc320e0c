import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// The client finds an event's handlers again only when its name or the handlers change: these
/// events of one name, with the handlers changed between them, must each reach the handlers
/// registered when it arrives.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SocketIOHandlerChangeTests {
    @Test("handlers changed between events of one name are the ones called", arguments: [0, 1])
    func handlersChangedBetweenEvents(mode: Int) async throws {
        let server = try await SocketIOTestServer.start()
        let transports: [EngineIOOptions.Transport] = mode == 0 ? [.websocket] : [.polling]
        let manager = SocketManager(url: server.url, configuration: .testing(transports, upgrade: false))
        let socket = manager.defaultSocket
        let seen = Recorder<String>()
        @Sendable func label(_ name: String, _ event: SocketIOEvent) -> String { "\(name)\(event.arguments.first?.intValue ?? -1)" }
        let first = socket.on("tick") { seen.append(label("A", $0)) }
        try await socket.connect(timeout: .seconds(30))

        server.broadcast("tick", [1])
        #expect(await seen.wait(for: 1) == ["A1"])

        socket.once("tick") { seen.append(label("B", $0)) }
        server.broadcast("tick", [2])
        #expect(await seen.wait(for: 3) == ["A1", "A2", "B2"])

        // The `once` handler is gone.
        server.broadcast("tick", [3])
        #expect(await seen.wait(for: 4) == ["A1", "A2", "B2", "A3"])

        socket.off(id: first)
        socket.on("tick") { seen.append(label("C", $0)) }
        server.broadcast("tick", [4])
        #expect(await seen.wait(for: 5) == ["A1", "A2", "B2", "A3", "C4"])

        // Names alternate: each finds its own handlers.
        socket.on("tock") { seen.append(label("D", $0)) }
        server.broadcast("tock", [5])
        server.broadcast("tick", [6])
        server.broadcast("tock", [7])
        #expect(await seen.wait(for: 8) == ["A1", "A2", "B2", "A3", "C4", "D5", "C6", "D7"])

        // No handler for the name any more: the next event of it reaches none.
        socket.off("tick")
        server.broadcast("tick", [8])
        server.broadcast("tock", [9])
        #expect(await seen.wait(for: 9) == ["A1", "A2", "B2", "A3", "C4", "D5", "C6", "D7", "D9"])

        // A handler for every event sees the next one, and the named handler still does.
        socket.onAny { seen.append("any \($0.event)") }
        server.broadcast("tock", [10])
        #expect(await seen.wait(for: 11).suffix(2) == ["any tock", "D10"])

        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }
}
