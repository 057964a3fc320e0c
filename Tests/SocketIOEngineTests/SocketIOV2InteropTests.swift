import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// socket.io 2.x servers (`SocketIOConfiguration.version = .v2`: Engine.IO 3, Socket.IO protocol 4)
/// against the reference peer python-socketio 4.6.1 with python-engineio 3.14.2 on aiohttp
/// (`Peers/sio2_server.py`, in `.venv-sio2`, pinned in Scripts/requirements-sio2.txt).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIOV2InteropTests {
    static let transportModes = SocketIOClientInteropTests.transportModes

    static func startPeer(_ arguments: [String] = []) async throws -> PythonPeer {
        try await PythonPeer.start(scriptPath: peerScript("sio2_server.py"), arguments: arguments, python: PythonPeer.socketIO2Python)
    }

    static func configuration(_ transports: [EngineIOOptions.Transport] = [.polling, .websocket], upgrade: Bool = true) -> SocketIOConfiguration {
        var configuration = SocketIOConfiguration.testing(transports, upgrade: upgrade)
        configuration.version = .v2
        return configuration
    }

    /// The peer's lines until one starts with `prefix` (empty when the peer ended first).
    static func line(from peer: PythonPeer, startingWith prefix: String) async -> String {
        while true {
            let line = await peer.nextLine()
            if line.hasPrefix(prefix) || line.isEmpty { return line }
        }
    }

    @Test("default namespace joined by the server: events, acks both ways, binary", arguments: [0, 1, 2])
    func defaultNamespace(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration(transports, upgrade: upgrade))
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
        let query = await Self.line(from: peer, startingWith: "GOT connect /")
        #expect(query.contains("EIO=3"), "\(query)")
        // socket.io 2 sends no sid with the CONNECT: the socket's id is the Engine.IO session's.
        let welcomed = await welcome.wait(for: 1)
        #expect(socket.sid != nil)
        #expect(welcomed.first?.first?["sid"]?.stringValue == socket.sid)

        let blob = Data((0...255).map { UInt8($0) })
        let reply = try await socket.emitWithAck("echo", arguments: ["text é😀", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]], timeout: .seconds(30))
        #expect(reply == ["text é😀", 42, 1.5, true, nil, ["nested": [1, .binary(blob)]]])

        try socket.emit("echo_event", arguments: [.binary(Data([1, 2, 3])), "after"])
        #expect(await echoed.wait(for: 1).first == [.binary(Data([1, 2, 3])), "after"])

        try socket.emit("ask", arguments: ["q1"])
        #expect(await answers.wait(for: 1).first == ["reply to", ["q1"]])

        if upgrade {
            try await waitUntil("the upgrade to WebSocket") { manager.transport == .websocket }
            // Binary both ways over the upgraded WebSocket (frames that start with the packet type).
            #expect(try await socket.emitWithAck("echo", arguments: [.binary(blob)], timeout: .seconds(30)) == [.binary(blob)])
        } else {
            #expect(manager.transport == transports.first)
        }
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    @Test("other namespaces: CONNECT with the auth as its query, refusals as ERROR packets")
    func namespaces() async throws {
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        var configuration = Self.configuration([.websocket])
        // python-socketio 4 shows its handlers the handshake's query only.
        configuration.engine.query["token"] = "secret"
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: configuration)
        defer { manager.disconnect() }
        let chat = manager.socket(forNamespace: "/chat", auth: .value(["token": "secret", "n": 2]))
        try await chat.connect(timeout: .seconds(30))
        #expect(await Self.line(from: peer, startingWith: "GOT packet 0/chat") == "GOT packet 0/chat?token=secret&n=2,")
        #expect(chat.sid?.hasPrefix("/chat#") == true, "\(chat.sid ?? "nil")")
        #expect(try await chat.emitWithAck("whoami", timeout: .seconds(30)) == ["secret"])
        #expect(try await chat.emitWithAck("echo", "in chat", timeout: .seconds(30)) == ["in chat"])

        let second = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration([.polling], upgrade: false))
        defer { second.disconnect() }
        let refused = second.socket(forNamespace: "/chat", auth: .value(["token": "wrong"]))
        let errors = Recorder<[JSONValue]>()
        refused.on(clientEvent: .error) { errors.append($0.arguments) }
        await #expect {
            try await refused.connect(timeout: .seconds(30))
        } throws: { error in
            (error as? RealtimeError)?.code == .refused && (error as? RealtimeError)?.serverMessage == "bad token"
        }
        #expect(refused.status == .disconnected)
        #expect(errors.values.first == ["bad token"])
        #expect(chat.status == .connected)
        manager.disconnect()
        second.disconnect()
        await manager.waitUntilStopped()
        await second.waitUntilStopped()
    }

    @Test("the default namespace's auth travels in the handshake's query")
    func defaultNamespaceAuth() async throws {
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration())
        defer { manager.disconnect() }
        let socket = manager.socket(forNamespace: "/", auth: .provider { ["token": "abc", "n": 1] })
        try await socket.connect(timeout: .seconds(30))
        let line = await Self.line(from: peer, startingWith: "GOT connect /")
        #expect(line.contains("token=abc") && line.contains("n=1"), "\(line)")
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    @Test("integers above 2^53 arrive exactly", arguments: [1, 2])
    func exactIntegers(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        try await manager.defaultSocket.connect(timeout: .seconds(30))
        let numbers = try await manager.defaultSocket.emitWithAck("big_numbers", timeout: .seconds(30)).first?.arrayValue ?? []
        #expect(numbers == [.integer(9_007_199_254_740_993), .integer(.max), .integer(.min), .unsignedInteger(.max), .number(1e300), .number(-0.0), .number(0.1)])
        #expect(try await manager.defaultSocket.emitWithAck("echo", arguments: [.integer(.max), .unsignedInteger(.max)], timeout: .seconds(30))
            == [.integer(.max), .unsignedInteger(.max)])
    }

    /// Engine.IO 3 reverses the heartbeat: the client pings every pingInterval and the server
    /// answers. python-engineio 3 closes a WebSocket that carries nothing from the client for
    /// pingTimeout, a long-polling GET that finds nothing to send for pingTimeout, and a session
    /// whose client stopped pinging for pingInterval + 5 s. Here pingInterval is 3 s, so the limits
    /// are 10 s (pingTimeout) and 8 s, and the session lives 5 pings (15 s). (With a 3 s
    /// pingTimeout, a full suite run once lost the session to "transport error": the server needs a
    /// client packet within pingTimeout, and a loaded machine can hold a 1 s ping back past 3 s.
    /// With 1 s and 6 s, a run beside CPU burners and a build lost it once more over polling.)
    @Test("the client pings; the session outlives the server's ping limit", arguments: [1, 2])
    func clientHeartbeat(mode: Int) async throws {
        let (_, transports, upgrade) = Self.transportModes[mode]
        let peer = try await Self.startPeer(["0", "3", "10"])
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration(transports, upgrade: upgrade))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let pongs = Recorder<Int>()
        let disconnects = Recorder<[JSONValue]>()
        socket.on(clientEvent: .ping) { _ in pongs.append(1) }
        socket.on(clientEvent: .disconnect) { disconnects.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        let sid = socket.sid
        await pongs.wait(for: 5, limit: .seconds(60))
        #expect(pongs.values.count >= 5)
        #expect(disconnects.values.isEmpty, "\(disconnects.values)")
        #expect(socket.sid == sid)
        #expect(try await socket.emitWithAck("echo", "still here", timeout: .seconds(30)) == ["still here"])
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    @Test("a server disconnect is reported and not retried")
    func serverDisconnect() async throws {
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let reasons = Recorder<[JSONValue]>()
        socket.on(clientEvent: .disconnect) { reasons.append($0.arguments) }
        try await socket.connect(timeout: .seconds(30))
        try socket.emit("disconnect_me", arguments: [])
        #expect(await reasons.wait(for: 1) == [["io server disconnect"]])
        #expect(socket.status == .disconnected)
        await manager.waitUntilStopped()
    }

    @Test("reconnects after the server restarts; emits made meanwhile are sent in order")
    func reconnectAfterRestart() async throws {
        var peer = try await Self.startPeer()
        let port = peer.port
        let manager = SocketManager(url: "http://127.0.0.1:\(port)", configuration: Self.configuration())
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let connects = Recorder<Int>()
        let disconnects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        socket.on(clientEvent: .disconnect) { _ in disconnects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        try await waitUntil("the upgrade to WebSocket") { manager.transport == .websocket }
        let firstSid = socket.sid

        await peer.stop()
        await disconnects.wait(for: 1)
        #expect(socket.status == .connecting)
        for index in 1...5 { try socket.emit("record", arguments: [.integer(Int64(index))]) }
        #expect(socket.queuedEmitCount == 5)

        peer = try await Self.startPeer([String(port)])
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

    @Test("leaving and joining the default namespace again on one session")
    func rejoinDefaultNamespace() async throws {
        let peer = try await Self.startPeer()
        defer { Task { await peer.stop() } }
        var configuration = Self.configuration([.websocket])
        configuration.engine.query["token"] = "secret"
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: configuration)
        defer { manager.disconnect() }
        // /chat keeps the session open while / leaves and comes back.
        let chat = manager.socket(forNamespace: "/chat")
        try await chat.connect(timeout: .seconds(30))
        let main = manager.defaultSocket
        // The server joined / at the handshake, before the socket asked: it is connected at once.
        try await main.connect(timeout: .seconds(30))
        #expect(try await main.emitWithAck("echo", "first", timeout: .seconds(30)) == ["first"])
        main.disconnect()
        #expect(await Self.line(from: peer, startingWith: "GOT packet 1") == "GOT packet 1")
        try await main.connect(timeout: .seconds(30))
        #expect(await Self.line(from: peer, startingWith: "GOT packet 0") == "GOT packet 0")
        #expect(try await main.emitWithAck("echo", "again", timeout: .seconds(30)) == ["again"])
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    /// socket.io 2.5 (engine.io 3.6 and later) accepts 1 MB per request by default and says nothing
    /// of it in its open packet: the peer runs with that limit. Emits queued before the connection
    /// are batched into POSTs under it (text written as UTF-8, not escapes), so all arrive; one
    /// larger than the limit fails here with `messageTooLarge` and a `dropped` report, and never
    /// reaches the wire.
    @Test("a 1 MB server: 15 emits of 100 kB queued before connecting all arrive over polling; 2 MB fails locally")
    func serverLimitOfOneMegabyte() async throws {
        let peer = try await Self.startPeer(["0", "25", "60", "1000000", "log-posts"])
        defer { Task { await peer.stop() } }
        let manager = SocketManager(url: "http://127.0.0.1:\(peer.port)", configuration: Self.configuration([.polling], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let dropped = Recorder<[JSONValue]>()
        let errors = Recorder<[JSONValue]>()
        socket.on(clientEvent: .dropped) { dropped.append($0.arguments) }
        socket.on(clientEvent: .error) { errors.append($0.arguments) }
        // 50,000 "é": 100,000 bytes of UTF-8 (300,000 as \u escapes).
        let text = String(repeating: "é", count: 50_000)
        for index in 0..<15 { try socket.emit("measure", arguments: [.integer(Int64(index)), .string(text)]) }
        let tooLarge = String(repeating: "x", count: 2_000_000)
        try socket.emit("measure", arguments: [99, .string(tooLarge)])
        try await socket.connect(timeout: .seconds(30))

        let lines = Recorder<String>()
        let reader = Task {
            while true {
                let line = await peer.nextLine()
                if line.isEmpty { return }
                if line.hasPrefix("GOT measure ") || line.hasPrefix("GOT POST ") { lines.append(line) }
            }
        }
        defer { reader.cancel() }
        func measured() -> [Int: Int] {
            var sizes: [Int: Int] = [:]
            for line in lines.values where line.hasPrefix("GOT measure ") {
                let fields = line.split(separator: " ")
                if fields.count == 4, let index = Int(fields[2]), let size = Int(fields[3]) { sizes[index] = size }
            }
            return sizes
        }
        try? await waitUntil("15 emits arrive", limit: .seconds(60)) { measured().count >= 15 }
        let posts = lines.values.filter { $0.hasPrefix("GOT POST ") }.compactMap { Int($0.split(separator: " ")[2]) }
        let measured = measured()
        #expect(measured.count == 15 && measured.values.allSatisfy { $0 == 100_000 }, "\(measured) \(lines.values)")
        #expect(measured[99] == nil)
        #expect(!posts.isEmpty && posts.allSatisfy { $0 <= 1_000_000 }, "no POST over the server's limit: \(posts)")
        #expect(posts.filter { $0 > 200_000 }.count <= 10, "batched, several emits a POST: \(posts)")
        let reports = await dropped.wait(for: 1)
        #expect(reports.first?.first?["data"]?.arrayValue?.first == 99, "\(reports)")

        let refused = await #expect(throws: RealtimeError.self) {
            _ = try await socket.emitWithAck("measure", arguments: [100, .string(tooLarge)], timeout: .seconds(10))
        }
        #expect(refused?.code == .messageTooLarge)
        #expect(socket.status == .connected, "the session lives on")
        #expect(try await socket.emitWithAck("echo", arguments: ["still here"], timeout: .seconds(30)) == ["still here"])
        // The queued emit that could never be sent is named by an `error` event too; nothing else.
        #expect(errors.values.count == 1 && "\(errors.values)".contains("messageTooLarge"), "\(errors.values)")
    }
}
