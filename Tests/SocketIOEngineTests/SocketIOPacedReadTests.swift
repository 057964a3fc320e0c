import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// SocketIOGuide.md, performance: at the pace of a server slower than its client, where each read
/// carries one event, an event costs one hand-over to an events loop, and a loop on the manager's
/// executor (`withTaskExecutorPreference(manager.taskExecutor)`), like every `on` handler, runs on
/// the thread that read it: no other thread is woken for it. The server sends an event only once
/// the reader has had the one before, so every read holds exactly one. Counted, not timed.
@Suite(.timeLimit(.minutes(2)))
struct SocketIOPacedReadTests {
    static let total = 200

    @Test("one event per read: one hand-over each, and on the manager's executor no other thread",
          arguments: [false, true])
    func eventsAtOnePerRead(onConnectionExecutor: Bool) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket], upgrade: false))
        let socket = manager.defaultSocket
        let events = socket.events(named: "tick", bufferSize: 16)
        try await socket.connect(timeout: .seconds(30))
        let received = Recorder<Int>()
        let offLoop = NIOLockedValueBox(0)
        let loop = manager.eventLoop
        let executor = manager.taskExecutor
        @Sendable func read() async {
            for await event in events {
                if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
                received.append(event.arguments.first?.intValue ?? -1)
                if received.values.count == Self.total + 1 { break }
            }
        }
        let consumer = Task.detached {
            if onConnectionExecutor {
                await withTaskExecutorPreference(executor) { await read() }
            } else {
                await read()
            }
        }
        // One event first: the loop has started and waits.
        server.broadcast("tick", [.integer(0)])
        _ = try await received.wait(count: 1, within: 30)
        let before = events.consumerWakeUps
        for index in 1...Self.total {
            try await waitUntil("the loop waits", limit: .seconds(30)) { events.isConsumerWaiting }
            server.broadcast("tick", [.integer(Int64(index))])
            _ = try await received.wait(count: index + 1, within: 30)
        }
        await consumer.value
        #expect(received.values == Array(0...Self.total))
        let handOvers = events.consumerWakeUps - before
        #expect(handOvers == Self.total, "\(handOvers) hand-overs for \(Self.total) reads of one event each")
        #expect(offLoop.withLockedValue { $0 } == (onConnectionExecutor ? 0 : Self.total + 1))
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    /// An ack resumes its caller where the caller runs: a caller on the manager's executor is
    /// resumed on the thread that read the ack, with no thread of the concurrency pool woken;
    /// sequential and pipelined emits alike.
    @Test("emitWithAck on the manager's executor is resumed on its event loop", arguments: [1, 16])
    func acksResumeOnTheLoop(inFlight: Int) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket], upgrade: false))
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        let loop = manager.eventLoop
        let (answers, offLoop) = await withTaskExecutorPreference(manager.taskExecutor) {
            await withTaskGroup(of: (Int, Bool).self) { group in
                for lane in 0..<inFlight {
                    group.addTask {
                        var answered = 0
                        var offLoop = false
                        for index in 0..<(64 / inFlight) {
                            let answer = try? await socket.emitWithAck("echo", lane * 1_000 + index, timeout: .seconds(30))
                            if answer == [.integer(Int64(lane * 1_000 + index))] { answered += 1 }
                            if !loop.inEventLoop { offLoop = true }
                        }
                        return (answered, offLoop)
                    }
                }
                var total = (0, 0)
                for await (answered, off) in group { total = (total.0 + answered, total.1 + (off ? 1 : 0)) }
                return total
            }
        }
        #expect(answers == 64)
        #expect(offLoop == 0, "\(offLoop) of \(inFlight) callers resumed off the event loop")
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    @Test("one event per read reaches an on handler on the manager's event loop")
    func handlersAtOnePerRead() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket], upgrade: false))
        let socket = manager.defaultSocket
        let received = Recorder<Int>()
        let offLoop = NIOLockedValueBox(0)
        let loop = manager.eventLoop
        socket.on("tick") { event in
            if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
            received.append(event.arguments.first?.intValue ?? -1)
        }
        try await socket.connect(timeout: .seconds(30))
        for index in 1...Self.total {
            server.broadcast("tick", [.integer(Int64(index))])
            _ = try await received.wait(count: index, within: 30)
        }
        #expect(received.values == Array(1...Self.total))
        #expect(offLoop.withLockedValue { $0 } == 0, "every handler ran on the manager's event loop")
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    /// SocketIOGuide.md, "Where your code runs": the manager keeps to one event loop through a
    /// reconnect. On a runtime of four event loops, a connection cut by a reset mid-session
    /// reconnects on the same loop: the handlers see every event on `manager.eventLoop`, before the
    /// cut and after.
    @Test("a reconnect after a reset comes back on the manager's one event loop")
    func reconnectKeepsTheEventLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 4)
        let server = try await SocketIOTestServer.start()
        let proxy = try await FaultProxy.start(targetPort: server.port)
        var configuration = SocketIOConfiguration.testing([.websocket], upgrade: false)
        configuration.runtime = RealtimeRuntime(eventLoopGroup: group)
        let manager = SocketManager(url: proxy.url(), configuration: configuration)
        let socket = manager.defaultSocket
        let loop = manager.eventLoop
        let received = Recorder<Int>()
        let offLoop = NIOLockedValueBox(0)
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        socket.on("tick") { event in
            if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
            received.append(event.arguments.first?.intValue ?? -1)
        }
        try await socket.connect(timeout: .seconds(30))
        server.broadcast("tick", [.integer(1)])
        _ = try await received.wait(count: 1, within: 30)
        proxy.cutAll(.reset)
        _ = try await connects.wait(count: 2, within: 30)
        server.broadcast("tick", [.integer(2)])
        _ = try await received.wait(count: 2, within: 30)
        #expect(received.values == [1, 2])
        #expect(manager.eventLoop === loop)
        #expect(offLoop.withLockedValue { $0 } == 0, "every event, before and after the reconnect, on the manager's loop")
        manager.disconnect()
        await manager.waitUntilStopped()
        await proxy.stop()
        await server.stop()
        try await group.shutdownGracefully()
    }
}
