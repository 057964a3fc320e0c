import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// The servers our client is checked against: python-socketio 5.18.1's AsyncServer (python-engineio
/// 4.15.1, aiohttp; pinned in Scripts/requirements.txt, started on 127.0.0.1 by each test) and our
/// in-process `SocketIOTestServer`. Both have the same built-in events.
enum ServerUnderTest: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case python
    case inProcess

    var testDescription: String { rawValue }

    struct Running: Sendable {
        let url: String
        let stop: @Sendable () async -> Void
    }

    func start(maxPayload: Int? = nil) async throws -> Running {
        switch self {
        case .python:
            let arguments = maxPayload.map { ["0", "25", "20", "\($0)"] } ?? []
            let peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"), arguments: arguments)
            return Running(url: "http://127.0.0.1:\(peer.port)", stop: { await peer.stop() })
        case .inProcess:
            var options = SocketIOTestServer.Options()
            if let maxPayload { options.maxPayload = maxPayload }
            let server = try await SocketIOTestServer.start(options: options)
            return Running(url: server.url, stop: { await server.stop() })
        }
    }
}

/// Our client against both servers (see ``ServerUnderTest``).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIOClientInteropTests {
    static let transportModes: [(String, [EngineIOOptions.Transport], Bool)] = [
        ("polling then upgrade", [.polling, .websocket], true),
        ("polling only", [.polling], false),
        ("websocket only", [.websocket], false),
    ]

    @Test("default namespace: connect, acks both ways, events, binary", arguments: ServerUnderTest.allCases, [0, 1, 2])
    func defaultNamespace(server: ServerUnderTest, mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try await server.start()
        let manager = SocketManager(url: peer.url, configuration: .testing(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let welcome = Recorder<[JSONValue]>()
        let echoed = Recorder<[JSONValue]>()
        let answers = Recorder<[JSONValue]>()
        socket.on("welcome") { welcome.append($0.arguments) }
        socket.on("echoed") { echoed.append($0.arguments) }
        socket.on("answer") { answers.append($0.arguments) }
        socket.on("question") { event in event.ack("reply to", .array(event.arguments)) }

        try await socket.connect(timeout: .seconds(30))
        #expect(socket.status == .connected)
        #expect(socket.sid != nil)
        // Emitted from the server's connect handler, so it may come before the CONNECT reply.
        let welcomed = await welcome.wait(for: 1)
        #expect(welcomed.first?.first?["sid"] != nil)

        let blob = Data((0...255).map { UInt8($0) })
        let reply = try await socket.emitWithAck("echo", arguments: ["text", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]], timeout: .seconds(30))
        #expect(reply == ["text", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]])

        try socket.emit("echo_event", arguments: [.binary(Data([1, 2, 3])), "after"])
        let events = await echoed.wait(for: 1)
        #expect(events.first == [.binary(Data([1, 2, 3])), "after"])

        try socket.emit("ask", arguments: ["q1"])
        let answered = await answers.wait(for: 1)
        #expect(answered.first == ["reply to", ["q1"]])

        if upgrade {
            // The upgrade happens in the background.
            try await waitUntil("the upgrade to WebSocket") { manager.transport == .websocket }
        } else {
            #expect(manager.transport == transports.first)
        }
        manager.disconnect()
        await manager.waitUntilStopped()
        await peer.stop()
    }

    /// Custom namespace: auth accepted (the provider is evaluated per connect), refused with a message;
    /// an unknown namespace refused (python-socketio: a plain string; Node and ours: an object).
        @Test(arguments: ServerUnderTest.allCases)
    func namespacesAndAuth(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        let manager = SocketManager(url: peer.url, configuration: .testing())
        defer { manager.disconnect() }

        let calls = Recorder<Int>()
        let chat = manager.socket(forNamespace: "/chat", auth: .provider {
            calls.append(1)
            return ["token": "secret"]
        })
        try await chat.connect(timeout: .seconds(30))
        #expect(try await chat.emitWithAck("whoami", timeout: .seconds(30)) == [["token": "secret"]])
        #expect(try await chat.emitWithAck("echo", "in chat", timeout: .seconds(30)) == ["in chat"])
        #expect(calls.values.count == 1)

        let intruder = manager.socket(forNamespace: "/chat-refused-alias")
        await #expect {
            try await intruder.connect(timeout: .seconds(30))
        } throws: { error in
            // python-socketio refuses an unknown namespace with a plain string.
            (error as? RealtimeError)?.code == .refused && (error as? RealtimeError)?.serverMessage?.isEmpty == false
        }

        let second = SocketManager(url: peer.url, configuration: .testing())
        defer { second.disconnect() }
        let badToken = second.socket(forNamespace: "/chat", auth: .value(["token": "wrong"]))
        let errors = Recorder<[JSONValue]>()
        badToken.on(clientEvent: .error) { errors.append($0.arguments) }
        await #expect {
            try await badToken.connect(timeout: .seconds(30))
        } throws: { error in
            (error as? RealtimeError)?.code == .refused && (error as? RealtimeError)?.serverMessage == "bad token"
        }
        #expect(badToken.status == .disconnected)
        #expect(errors.values.first == [["message": "bad token"]])
        // The other namespace on the first manager is unaffected.
        #expect(chat.status == .connected)
        manager.disconnect()
        second.disconnect()
        await manager.waitUntilStopped()
        await second.waitUntilStopped()
        await peer.stop()
    }

    @Test("server-initiated disconnect is reported and not retried", arguments: ServerUnderTest.allCases)
    func serverDisconnect(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        let manager = SocketManager(url: peer.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        try socket.emit("disconnect_me", arguments: [])
        #expect(await reasons.wait(for: 1) == [["io server disconnect"]])
        #expect(socket.status == .disconnected)
        await manager.waitUntilStopped()
        await peer.stop()
    }

    @Test("reconnects after the server restarts; emits made meanwhile are sent in order", arguments: [0, 2])
    func reconnectAfterRestart(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        var peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"))
        let port = peer.port
        let manager = SocketManager(url: "http://127.0.0.1:\(port)", configuration: .testing(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        let disconnects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        socket.on(clientEvent: .disconnect) { _ in disconnects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        let firstSid = socket.sid

        await peer.stop()
        await disconnects.wait(for: 1)
        #expect(socket.status == .connecting)
        for index in 1...5 { try socket.emit("record", arguments: [.number(Double(index))]) }
        #expect(socket.queuedEmitCount == 5)

        peer = try await PythonPeer.start(scriptPath: peerScript("sio_server.py"), arguments: [String(port)])
        let restarted = peer
        defer { Task { await restarted.stop() } }
        await connects.wait(for: 2, limit: .seconds(20))
        #expect(socket.status == .connected)
        #expect(socket.sid != firstSid)
        var recorded: [String] = []
        while recorded.count < 5 {
            let line = await peer.nextLine()
            if line.hasPrefix("GOT record") { recorded.append(String(line.dropFirst("GOT record ".count))) }
            if line.isEmpty { break }
        }
        #expect(recorded == ["[1]", "[2]", "[3]", "[4]", "[5]"])
        #expect(socket.queuedEmitCount == 0)
    }

    @Test("an ack that never comes times out; the socket keeps working", arguments: ServerUnderTest.allCases)
    func ackTimeout(server: ServerUnderTest) async throws {
        let peer = try await server.start()
        let manager = SocketManager(url: peer.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        // Neither server acks an event it has no handler for.
        await #expect {
            _ = try await socket.emitWithAck("no_such_handler", timeout: .milliseconds(300))
        } throws: { error in
            (error as? RealtimeError)?.code == .timeout
        }
        // The socket still works afterwards.
        #expect(try await socket.emitWithAck("echo", 1, timeout: .seconds(30)) == [1])
        manager.disconnect()
        await manager.waitUntilStopped()
        await peer.stop()
    }

    /// python-socketio sends Python ints above 2^53 and they arrive unchanged; ours reach it as
    /// the same ints (-0.0, 1e300 and 0.1 stay doubles).
    @Test("64-bit integers both ways against python-socketio", arguments: [0, 2])
    func exactIntegers(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try await ServerUnderTest.python.start()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: peer.url, configuration: .testing(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        // A list a python-socketio handler returns is one ack argument.
        let numbers = try await socket.emitWithAck("big_numbers", timeout: .seconds(30)).first?.arrayValue ?? []
        #expect(numbers == [.integer(9_007_199_254_740_993), .integer(.max), .integer(.min), .unsignedInteger(.max), .number(1e300), .number(-0.0), .number(0.1)])
        #expect(numbers.map(\.jsonString) == ["9007199254740993", "9223372036854775807", "-9223372036854775808", "18446744073709551615", "1e+300", "-0", "0.1"])
        for (value, text) in [(JSONValue.integer(9_007_199_254_740_993), "9007199254740993"), (.integer(.min), "-9223372036854775808"),
                              (.unsignedInteger(.max), "18446744073709551615")] {
            #expect(try await socket.emitWithAck("is_exactly", arguments: [value, .string(text)], timeout: .seconds(30)) == [true], "\(text)")
        }
        #expect(try await socket.emitWithAck("is_exactly", arguments: [UInt64.max.socketRepresentation(), "18446744073709551615"], timeout: .seconds(30)) == [true])
        #expect(try await socket.emitWithAck("echo", arguments: [.integer(.max)], timeout: .seconds(30)) == [.integer(.max)])
    }
}
