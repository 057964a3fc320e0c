import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Our client against python-socketio 5.18.1's AsyncServer (python-engineio 4.15.1, aiohttp), the
/// peer pinned in Scripts/requirements.txt and started on 127.0.0.1 by each test.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct PythonSocketIOServerTests {
    static let transportModes: [(String, [EngineIOOptions.Transport], Bool)] = [
        ("polling then upgrade", [.polling, .websocket], true),
        ("polling only", [.polling], false),
        ("websocket only", [.websocket], false),
    ]

    @Test("default namespace: connect, acks both ways, events, binary", arguments: [0, 1, 2])
    func defaultNamespace(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try PythonPeer(scriptPath: peerScript("sio_server.py"))
        defer { peer.stop() }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: .testing(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let welcome = Recorder<[JSONValue]>()
        let echoed = Recorder<[JSONValue]>()
        let answers = Recorder<[JSONValue]>()
        socket.on("welcome") { welcome.append($0.arguments) }
        socket.on("echoed") { echoed.append($0.arguments) }
        socket.on("answer") { answers.append($0.arguments) }
        socket.on("question") { event in event.ack(["reply to", .array(event.arguments)]) }

        try await socket.connect(timeout: .seconds(10))
        #expect(socket.status == .connected)
        #expect(socket.sid != nil)
        // Emitted from the server's connect handler, so it may come before the CONNECT reply.
        let welcomed = await welcome.wait(for: 1)
        #expect(welcomed.first?.first?["sid"] != nil)

        let blob = Data((0...255).map { UInt8($0) })
        let reply = try await socket.emitWithAck("echo", arguments: ["text", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]], timeout: .seconds(5))
        #expect(reply == ["text", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]])

        try socket.emit("echo_event", arguments: [.binary(Data([1, 2, 3])), "after"])
        let events = await echoed.wait(for: 1)
        #expect(events.first == [.binary(Data([1, 2, 3])), "after"])

        try socket.emit("ask", arguments: ["q1"])
        let answered = await answers.wait(for: 1)
        #expect(answered.first == ["reply to", ["q1"]])

        if upgrade {
            // The upgrade happens in the background; it must have moved us to WebSocket by now or soon.
            for _ in 0..<50 where manager.transport != .websocket { try await Task.sleep(for: .milliseconds(20)) }
            #expect(manager.transport == .websocket)
        } else {
            #expect(manager.transport == transports.first)
        }
    }
}
