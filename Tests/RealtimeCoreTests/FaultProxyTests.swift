import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeTesting
import Testing

/// The fault proxy the delivery tests rely on: each fault does what its documentation says, measured
/// with raw TCP sockets on both sides.
@Suite(.timeLimit(.minutes(1))) struct FaultProxyTests {
    @Test func forwardsBothWaysAndCounts() async throws {
        let target = try await TCPSink.start(echo: true)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let client = try await RawClient.connect(port: proxy.port)
        try await client.send(bytes: 10_000)
        try await client.waitForReceived(10_000)
        #expect(proxy.statistics.bytesToTarget == 10_000)
        #expect(proxy.statistics.bytesToClient == 10_000)
        #expect(proxy.statistics.connectionsAccepted == 1)
        #expect(proxy.statistics.connectionsOpen == 1)
        await proxy.stop()
        #expect(try await client.waitForEnd() == .eof)
        await target.stop()
    }

    @Test(arguments: [FaultProxy.CutMode.fin, .reset])
    func cutClosesEveryConnection(mode: FaultProxy.CutMode) async throws {
        let target = try await TCPSink.start(echo: true)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let clients = try await [RawClient.connect(port: proxy.port), RawClient.connect(port: proxy.port)]
        for client in clients { try await client.send(bytes: 10) }
        for client in clients { try await client.waitForReceived(10) }
        proxy.cutAll(mode)
        for client in clients {
            #expect(try await client.waitForEnd() == (mode == .fin ? .eof : .reset))
        }
        #expect(proxy.statistics.connectionsCut == 2)
        #expect(proxy.faultLog == [.cut(mode)])
        await proxy.stop()
        await target.stop()
    }

    @Test func cutAfterBytesForwardsExactlyThatMany() async throws {
        let target = try await TCPSink.start(echo: false)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let client = try await RawClient.connect(port: proxy.port)
        try await client.send(bytes: 1_000)
        try await target.waitForReceived(1_000)
        proxy.inject(.cutAfter(bytes: 12_345, .clientToTarget, .fin))
        // More than the trigger, in chunks, so the cut lands inside one.
        for _ in 0..<10 { try? await client.send(bytes: 4_000) }
        try await target.waitForClosed()
        #expect(target.received == 1_000 + 12_345)
        #expect(proxy.statistics.bytesToTarget == 1_000 + 12_345)
        await proxy.stop()
        await target.stop()
    }

    @Test func stallHoldsBytesUntilResumed() async throws {
        let target = try await TCPSink.start(echo: false)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let client = try await RawClient.connect(port: proxy.port)
        try await client.send(bytes: 100)
        try await target.waitForReceived(100)
        proxy.inject(.stall(.both, for: nil))
        try await client.send(bytes: 5_000)
        // "Nothing passes" is an absence: sampled after a moment, not awaited.
        try await Task.sleep(for: .milliseconds(200))
        #expect(target.received == 100, "nothing passes a stall")
        proxy.resume()
        try await target.waitForReceived(5_100)
        await proxy.stop()
        await target.stop()
    }

    @Test func stallWithADurationEndsByItself() async throws {
        let target = try await TCPSink.start(echo: false)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let client = try await RawClient.connect(port: proxy.port)
        proxy.inject(.stall(.clientToTarget, for: .milliseconds(300)))
        let start = ContinuousClock.now
        try await client.send(bytes: 10)
        try await target.waitForReceived(10)
        #expect(ContinuousClock.now - start >= .milliseconds(290))
        await proxy.stop()
        await target.stop()
    }

    @Test func latencyDelaysEveryChunk() async throws {
        let target = try await TCPSink.start(echo: true)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let client = try await RawClient.connect(port: proxy.port)
        proxy.inject(.latency(.milliseconds(150), .both, for: nil))
        let start = ContinuousClock.now
        try await client.send(bytes: 10)
        try await client.waitForReceived(10)
        #expect(ContinuousClock.now - start >= .milliseconds(290), "150 ms each way")
        proxy.resume()
        await proxy.stop()
        await target.stop()
    }

    @Test func refusesNewConnectionsThenAcceptsAgain() async throws {
        let target = try await TCPSink.start(echo: true)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let open = try await RawClient.connect(port: proxy.port)
        try await open.send(bytes: 1)
        try await open.waitForReceived(1)
        await proxy.refuseConnections()
        await #expect(throws: (any Error).self) { try await RawClient.connect(port: proxy.port) }
        // A connection made before goes on.
        try await open.send(bytes: 10)
        try await open.waitForReceived(11)
        try await proxy.acceptConnections()
        let later = try await RawClient.connect(port: proxy.port)
        try await later.send(bytes: 10)
        try await later.waitForReceived(10)
        #expect(proxy.statistics.connectionsAccepted == 2)
        await proxy.stop()
        await target.stop()
    }

    @Test func randomScheduleIsAFunctionOfTheSeed() {
        let schedule = RandomFaultSchedule(
            seed: 42, count: 50, kinds: [.cutFIN, .cutReset, .stall(.milliseconds(10) ... .milliseconds(20)), .refuse(.milliseconds(5) ... .milliseconds(9))])
        let first = schedule.plan(), second = schedule.plan()
        #expect(first.map(\.fault) == second.map(\.fault))
        #expect(first.map(\.at) == second.map(\.at))
        #expect(Set(first.map(\.fault.description.first)).count > 1, "several kinds are drawn")
        var other = schedule
        other.seed = 43
        #expect(other.plan().map(\.fault) != first.map(\.fault))
        #expect(zip(first, first.dropFirst()).allSatisfy { $0.at < $1.at })
    }

    @Test func randomScheduleAppliesItsPlan() async throws {
        let target = try await TCPSink.start(echo: true)
        let proxy = try await FaultProxy.start(targetPort: target.port)
        let schedule = RandomFaultSchedule(seed: 9, count: 5, interval: .milliseconds(10) ... .milliseconds(30), kinds: [.cutFIN, .cutReset])
        proxy.startRandomFaults(schedule)
        try await waitUntil("five faults applied") { proxy.faultLog.count >= 5 }
        #expect(proxy.faultLog == schedule.plan().map(\.fault))
        await proxy.stop()
        await target.stop()
    }
}

/// A TCP server on 127.0.0.1 that counts what it receives and optionally echoes it.
final class TCPSink: Sendable {
    let port: Int
    private let channel: any Channel
    private let counters: NIOLockedValueBox<(received: Int, closed: Int)>

    private init(port: Int, channel: any Channel, counters: NIOLockedValueBox<(received: Int, closed: Int)>) {
        self.port = port
        self.channel = channel
        self.counters = counters
    }

    static func start(echo: Bool) async throws -> TCPSink {
        let counters = NIOLockedValueBox((received: 0, closed: 0))
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(SinkHandler(echo: echo, counters: counters))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return TCPSink(port: channel.localAddress!.port!, channel: channel, counters: counters)
    }

    var received: Int { counters.withLockedValue { $0.received } }

    func waitForReceived(_ count: Int) async throws {
        try await waitUntil("the target received \(count) bytes (\(received) so far)", limit: .seconds(20)) { received >= count }
    }

    func waitForClosed() async throws {
        try await waitUntil("a connection closed", limit: .seconds(20)) { counters.withLockedValue { $0.closed } > 0 }
    }

    func stop() async { try? await channel.close() }

    private final class SinkHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let echo: Bool
        let counters: NIOLockedValueBox<(received: Int, closed: Int)>
        init(echo: Bool, counters: NIOLockedValueBox<(received: Int, closed: Int)>) {
            self.echo = echo
            self.counters = counters
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            counters.withLockedValue { $0.received += buffer.readableBytes }
            if echo { context.writeAndFlush(wrapOutboundOut(buffer), promise: nil) }
        }
        func channelInactive(context: ChannelHandlerContext) {
            counters.withLockedValue { $0.closed += 1 }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}

/// A raw TCP client that counts the bytes it reads and how its connection ended.
final class RawClient: Sendable {
    enum End: Equatable { case eof, reset, other }
    private let channel: any Channel
    private let state = NIOLockedValueBox((received: 0, end: End?.none))

    private init(channel: any Channel) { self.channel = channel }

    static func connect(port: Int) async throws -> RawClient {
        let box = NIOLockedValueBox<RawClient?>(nil)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Reader(box: box))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        let client = RawClient(channel: channel)
        box.withLockedValue { $0 = client }
        return client
    }

    func send(bytes: Int) async throws {
        try await channel.writeAndFlush(ByteBuffer(repeating: 0x61, count: bytes))
    }

    func waitForReceived(_ count: Int) async throws {
        try await waitUntil("the client received \(count) bytes", limit: .seconds(20)) { state.withLockedValue { $0.received } >= count }
    }

    func waitForEnd() async throws -> End {
        try await channel.closeFuture.get()
        return state.withLockedValue { $0.end } ?? .other
    }

    fileprivate func read(_ count: Int) { state.withLockedValue { $0.received += count } }
    fileprivate func ended(_ end: End) {
        state.withLockedValue { if $0.end == nil { $0.end = end } }
    }

    private final class Reader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let box: NIOLockedValueBox<RawClient?>
        init(box: NIOLockedValueBox<RawClient?>) { self.box = box }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            box.withLockedValue { $0 }?.read(unwrapInboundIn(data).readableBytes)
        }
        func channelInactive(context: ChannelHandlerContext) { box.withLockedValue { $0 }?.ended(.eof) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            if let error = error as? IOError, error.errnoCode == ECONNRESET {
                box.withLockedValue { $0 }?.ended(.reset)
            } else {
                box.withLockedValue { $0 }?.ended(.other)
            }
            context.close(promise: nil)
        }
    }
}
