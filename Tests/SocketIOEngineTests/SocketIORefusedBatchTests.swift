import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// A batch the server refused is never sent again unchanged (no poison message): against a
/// SocketIOTestServer whose real POST body limit is below the `maxPayload` it announces (a server
/// behind nginx answering 413, or a socket.io 2.x server that resets the connection), emits of a
/// refused POST are sent again one per POST, and an emit refused alone (413) or twice (reset) is
/// dropped: its ack fails, a `dropped` event names it, and the emits behind it go on.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIORefusedBatchTests {
    /// The real POST body limit; the server announces 1 MB.
    static let limit = 20_000

    /// Behind a proxy that answers 413 (the session goes on): 10 emits with acks in one refused
    /// POST are each sent again alone and acked; one over the real limit, alone, is dropped.
    @Test("413: each emit of the refused batch is sent again alone and acked; an oversized one is dropped")
    func status413WithAcks() async throws {
        var options = SocketIOTestServer.Options()
        options.postBodyLimit = Self.limit
        let server = try await SocketIOTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let dropped = Recorder<JSONValue>()
        socket.on(clientEvent: .dropped) { event in for value in event.arguments { dropped.append(value) } }
        let resent = Recorder<JSONValue>()
        socket.on(clientEvent: .resent) { event in for value in event.arguments { resent.append(value) } }

        // 10 emits of 30% of the limit each, queued before connecting: together far over it.
        let filler = String(repeating: "x", count: Self.limit * 3 / 10)
        let acks = Recorder<(Int, Result<[JSONValue], RealtimeError>)>()
        for index in 0..<10 {
            Task {
                do {
                    acks.append((index, .success(try await socket.emitWithAck("echo", "item-\(index)-", filler, timeout: .seconds(60)))))
                } catch let error as RealtimeError {
                    acks.append((index, .failure(error)))
                }
            }
        }
        try await waitUntil("the 10 emits are queued") { socket.queuedEmitCount == 10 }
        try await socket.connect(timeout: .seconds(30))
        let answers = await acks.wait(for: 10, limit: .seconds(60))
        #expect(answers.count == 10)
        for (index, result) in answers {
            guard case .success(let arguments) = result else {
                Issue.record("emit \(index) failed: \(result)")
                continue
            }
            #expect(arguments == [.string("item-\(index)-"), .string(filler)])
        }
        // Each emit was POSTed at most twice: once in the refused batch, once alone.
        let bodies = server.postBodies + server.refusedPostBodies
        for index in 0..<10 {
            let posts = bodies.count { $0.contains("item-\(index)-") }
            #expect((1...2).contains(posts), "emit \(index) was POSTed \(posts) times")
        }
        #expect(!server.refusedPostBodies.isEmpty, "a batch was refused")
        #expect(dropped.values.isEmpty, "\(dropped.values)")

        // One emit over the real limit, alone: refused once, then dropped.
        let huge = String(repeating: "y", count: Self.limit + 1_000)
        await #expect {
            _ = try await socket.emitWithAck("echo", "huge-", huge, timeout: .seconds(60))
        } throws: { error in
            (error as? RealtimeError)?.code == .messageTooLarge
        }
        let reports = await dropped.wait(for: 1, limit: .seconds(30))
        #expect(reports.count == 1)
        #expect(reports.first?["delivery"]?.stringValue == "possiblySent", "\(reports)")
        #expect(reports.first?["ackId"] != nil, "\(reports)")
        #expect(server.refusedPostBodies.count { $0.contains("huge-") } == 1)
        #expect(!server.postBodies.contains { $0.contains("huge-") })

        // Emits still go, on the same session: a 413 does not end it.
        #expect(try await socket.emitWithAck("echo", "after", timeout: .seconds(30)) == ["after"])
        #expect(server.handshakeQueries.count == 1, "\(server.handshakeQueries.count) sessions")
        #expect(resent.values.isEmpty, "\(resent.values)")
    }

    /// Emits without acks (sent again after a drop): those of a refused POST arrive, in order,
    /// each POSTed at most twice; one over the real limit is dropped after one 413, or after two
    /// resets (a reset alone is not as clear), and the emits after it go.
    @Test("refused POST of emits without acks: each arrives once it goes alone; an oversized one is dropped", arguments: [
        SocketIOTestServer.PostRefusal.status413, .reset,
    ])
    func emitsWithoutAcks(refusal: SocketIOTestServer.PostRefusal) async throws {
        var options = SocketIOTestServer.Options()
        options.postBodyLimit = Self.limit
        options.postRefusal = refusal
        let server = try await SocketIOTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let dropped = Recorder<JSONValue>()
        socket.on(clientEvent: .dropped) { event in for value in event.arguments { dropped.append(value) } }
        let filler = String(repeating: "x", count: Self.limit * 3 / 10)
        for index in 0..<10 { try socket.emit("record", arguments: [.string("item-\(index)-"), .string(filler)]) }
        try await socket.connect(timeout: .seconds(30))
        try await waitUntil("the server recorded the 10 emits") { server.recorded.count >= 10 }
        #expect(server.recorded.compactMap { $0.first?.stringValue } == (0..<10).map { "item-\($0)-" })
        let bodies = server.postBodies + server.refusedPostBodies
        for index in 0..<10 {
            let posts = bodies.count { $0.contains("item-\(index)-") }
            #expect((1...2).contains(posts), "emit \(index) was POSTed \(posts) times")
        }
        #expect(!server.refusedPostBodies.isEmpty, "a batch was refused")
        // A 413 keeps the session; a reset ends it (once, or twice when the flush raced the
        // writer and a second batch of emits not refused yet was taken).
        let sessions = server.handshakeQueries.count
        #expect(refusal == .status413 ? sessions == 1 : (2...3).contains(sessions), "\(sessions) sessions")

        let huge = String(repeating: "y", count: Self.limit + 1_000)
        try socket.emit("record", arguments: [.string("huge-"), .string(huge)])
        let reports = await dropped.wait(for: 1, limit: .seconds(30))
        #expect(reports.first?["delivery"]?.stringValue == "possiblySent", "\(reports)")
        #expect(reports.first?["data"]?[0]?.stringValue == "huge-", "\(reports)")
        let hugePosts = server.refusedPostBodies.count { $0.contains("huge-") }
        #expect(hugePosts == (refusal == .status413 ? 1 : 2), "the oversized emit was POSTed \(hugePosts) times")
        try socket.emit("record", arguments: [.string("after")])
        try await waitUntil("the server recorded the emit after it") { server.recorded.contains { $0.first?.stringValue == "after" } }
        #expect(!server.recorded.contains { $0.first?.stringValue == "huge-" })
        #expect(dropped.values.count == 1, "\(dropped.values)")
        #expect(server.handshakeQueries.count == sessions + (refusal == .status413 ? 0 : 2), "\(server.handshakeQueries.count) sessions")
    }

    /// A reset may come after the server handled the POST: emits with acks in it keep their
    /// promise (sent at most once, the ack fails with `connectionClosed`), as after any cut; they
    /// are not sent again, so they cannot loop either.
    @Test("reset: emits with acks in the refused batch fail with connectionClosed, each POSTed once")
    func resetWithAcks() async throws {
        var options = SocketIOTestServer.Options()
        options.postBodyLimit = Self.limit
        options.postRefusal = .reset
        let server = try await SocketIOTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.polling], upgrade: false))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let filler = String(repeating: "x", count: Self.limit * 3 / 10)
        let acks = Recorder<(Int, Result<[JSONValue], RealtimeError>)>()
        for index in 0..<10 {
            Task {
                do {
                    acks.append((index, .success(try await socket.emitWithAck("echo", "item-\(index)-", filler, timeout: .seconds(60)))))
                } catch let error as RealtimeError {
                    acks.append((index, .failure(error)))
                }
            }
        }
        try await waitUntil("the 10 emits are queued") { socket.queuedEmitCount == 10 }
        try await socket.connect(timeout: .seconds(30))
        let answers = await acks.wait(for: 10, limit: .seconds(60))
        #expect(answers.count == 10)
        let bodies = server.postBodies + server.refusedPostBodies
        for (index, result) in answers {
            let posts = bodies.count { $0.contains("item-\(index)-") }
            #expect(posts == 1, "emit \(index) was POSTed \(posts) times")
            switch result {
            case .success(let arguments): #expect(arguments == [.string("item-\(index)-"), .string(filler)])
            case .failure(let error): #expect(error.code == .connectionClosed, "\(error)")
            }
        }
        #expect(answers.contains { if case .failure = $0.1 { true } else { false } }, "a batch was refused")
        #expect(try await socket.emitWithAck("echo", "after", timeout: .seconds(30)) == ["after"])
        #expect(server.handshakeQueries.count <= 3, "\(server.handshakeQueries.count) sessions")
    }

    /// Over WebSocket, a server that closes with 1009 refused the largest unconfirmed emit: it is
    /// dropped (its ack fails with `messageTooLarge`, a `dropped` event names it) instead of being
    /// sent again on every reconnect; the emits after it go on.
    @Test("WebSocket closed with 1009: the oversized emit is dropped, not sent again")
    func webSocketMessageTooBig() async throws {
        var options = SocketIOTestServer.Options()
        options.webSocketMessageLimit = Self.limit
        let server = try await SocketIOTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let dropped = Recorder<JSONValue>()
        socket.on(clientEvent: .dropped) { event in for value in event.arguments { dropped.append(value) } }
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "before", timeout: .seconds(30)) == ["before"])

        let huge = String(repeating: "y", count: Self.limit + 1_000)
        await #expect {
            _ = try await socket.emitWithAck("echo", "huge-ack-", huge, timeout: .seconds(60))
        } throws: { error in
            (error as? RealtimeError)?.code == .messageTooLarge
        }
        // Without an ack: once dropped it is not sent again after the reconnect.
        try socket.emit("record", arguments: [.string("huge-plain-"), .string(huge)])
        let reports = await dropped.wait(for: 2, limit: .seconds(30))
        #expect(reports.compactMap { $0["data"]?[0]?.stringValue } == ["huge-ack-", "huge-plain-"], "\(reports)")
        #expect(reports.allSatisfy { $0["delivery"]?.stringValue == "possiblySent" }, "\(reports)")
        #expect(try await socket.emitWithAck("echo", "after", timeout: .seconds(30)) == ["after"])
        try socket.emit("record", arguments: [.string("small")])
        try await waitUntil("the server recorded the small emit") { server.recorded.contains { $0.first?.stringValue == "small" } }
        #expect(!server.recorded.contains { $0.first?.stringValue == "huge-plain-" })
        #expect(dropped.values.count == 2, "\(dropped.values)")
        #expect(server.handshakeQueries.count == 3, "one session per 1009, no more")
    }
}
