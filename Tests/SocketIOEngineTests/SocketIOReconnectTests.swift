import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Reconnection as the JavaScript socket.io-client 4.x does it: the backoff starts over after every
/// session that carried a packet, and the disconnect reasons (with no `error` event) of a
/// connection that ended under the client. Over a real socket (SocketIOTestServer's WebSocket).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIOReconnectTests {
    /// Sessions shorter than the policy's `stableAfter` (5 s) that carried a packet each: without
    /// the reset the attempts would count 1, 2, 3 (the delay doubling each time).
    @Test("the backoff starts over after each session that carried a packet, however short")
    func backoffResetsAfterEachSession() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let attempts = Recorder<JSONValue>()
        socket.on(clientEvent: .reconnectAttempt) { attempts.append($0.arguments.first ?? .null) }
        let reconnects = Recorder<JSONValue>()
        socket.on(clientEvent: .reconnect) { reconnects.append($0.arguments.first ?? .null) }
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        for session in 1...3 {
            #expect(try await socket.emitWithAck("echo", session, timeout: .seconds(30)) == [.integer(Int64(session))])
            server.dropAllConnections()
            try await waitUntil("reconnected after cut \(session)") { connects.values.count == session + 1 }
        }
        #expect(try await socket.emitWithAck("echo", "last", timeout: .seconds(30)) == ["last"])
        #expect(attempts.values == [1, 1, 1], "\(attempts.values)")
        #expect(reconnects.values == [1, 1, 1], "\(reconnects.values)")
    }

    enum Ending: String, CaseIterable, CustomTestStringConvertible {
        case serverClose1000, serverClose1001, cutFin, cutReset, serverShutdown
        var testDescription: String { rawValue }
    }

    /// A WebSocket that ended under an open session without an Engine.IO close packet: the server
    /// closed it (1000, 1001), the connection was killed (an EOF with no close frame, a reset), or
    /// the server shut down. socket.io-client 4.x says "transport close" and fires no `error`.
    /// Reconnection is off, so every event has fired once the manager stopped.
    @Test("a WebSocket ended under the session: \"transport close\" and no error event", arguments: Ending.allCases)
    func transportCloseReasons(ending: Ending) async throws {
        let server = try await SocketIOTestServer.start()
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.reconnection = false
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        let errors = Recorder<[JSONValue]>()
        socket.on(clientEvent: .error) { errors.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "before", timeout: .seconds(30)) == ["before"])
        switch ending {
        case .serverClose1000: server.dropAllConnections()
        case .serverClose1001: server.closeWebSockets(code: 1001, reason: "going away")
        case .cutFin: proxy.cutAll(.fin)
        case .cutReset: proxy.cutAll(.reset)
        case .serverShutdown: await server.stop()
        }
        await manager.waitUntilStopped()
        #expect(reasons.values == [["transport close"]], "\(reasons.values)")
        #expect(errors.values.isEmpty, "\(errors.values)")
        if ending != .serverShutdown { await server.stop() }
    }

    /// A client disconnect over HTTP long-polling, as socket.io-client 4.x sends it: the namespace's
    /// DISCONNECT (`41`) in one POST, then, once that POST is answered, the Engine.IO close (`1`)
    /// alone, once (the manager's disconnect leaves every namespace, then closes the engine).
    @Test("client disconnect over polling: POST \"41\", then POST \"1\", the close sent once")
    func clientDisconnectOverPolling() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "before", timeout: .seconds(30)) == ["before"])
        manager.disconnect()
        await manager.waitUntilStopped()
        try await waitUntil("the server ended the session") { server.sessionCount == 0 }
        let bodies = server.postBodies
        #expect(Array(bodies.suffix(2)) == ["41", "1"], "\(bodies)")
        let closes = bodies.flatMap { $0.split(separator: "\u{1e}") }.filter { $0 == "1" }
        #expect(closes.count == 1, "\(bodies)")
        #expect(reasons.values == [["io client disconnect"]])
    }

    /// The same against python-socketio: its disconnect handler is told the client left (its
    /// reason for a DISCONNECT packet), not that the transport closed.
    @Test("client disconnect over polling: python-socketio sees the client leave")
    func clientDisconnectOverPollingPython() async throws {
        let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: .testing([.polling], upgrade: false))
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "before", timeout: .seconds(30)) == ["before"])
        manager.disconnect()
        await manager.waitUntilStopped()
        var disconnects: [String] = []
        while disconnects.isEmpty {
            let line = await peer.nextLine()
            if line.hasPrefix("GOT disconnect") { disconnects.append(line) }
            if line.isEmpty { break }
        }
        #expect(disconnects == [#"GOT disconnect / reason="client disconnect""#])
    }
}
