import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
@testable import RealtimeCore
import Testing

/// `send` returns only when the channel has accepted the frame: against a peer that completes the
/// upgrade and then stops reading, sends stop once the socket buffers are full, so memory stays
/// bounded whatever the application tries to send (the flush coalescing holds flushes, never writes).
@Suite(.timeLimit(.minutes(1))) struct WebSocketBackpressureTests {
    @Test func sendsStallAgainstAPeerThatStopsReading() async throws {
        let server = try await StalledWebSocketPeer.start()
        defer { Task { await server.stop() } }
        let completed = NIOLockedValueBox(0)
        let attempts = 4000  // 4,000 x 64 KiB = 250 MiB, far beyond any socket buffer
        let frame = ByteBuffer(repeating: 0x5A, count: 64 * 1024)
        let sender = Task {
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(server.port)/", configuration: WebSocketConfiguration(autoPing: nil, closeTimeout: .milliseconds(200))
            ) { connection in
                for _ in 0..<attempts {
                    try await connection.send(binary: frame)
                    completed.withLockedValue { $0 += 1 }
                }
            }
        }
        // Wait for the first accepted frame (the connect can take seconds on a loaded CI machine,
        // which this loop once mistook for "no progress"), then until the sends stop making progress.
        let firstDeadline = ContinuousClock.now + .seconds(30)
        while completed.withLockedValue({ $0 }) == 0, ContinuousClock.now < firstDeadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        var last = -1
        var now = completed.withLockedValue { $0 }
        while now != last {
            last = now
            try await Task.sleep(for: .milliseconds(500))
            now = completed.withLockedValue { $0 }
        }
        sender.cancel()
        _ = await sender.result
        #expect(now > 0, "some frames fit in the socket buffers")
        #expect(now < attempts)
        #expect(now * 64 * 1024 < 64 << 20, "\(now) frames of 64 KiB were accepted by a peer that reads nothing")
    }
}

/// Answers the WebSocket upgrade and then never reads again.
final class StalledWebSocketPeer: Sendable {
    let port: Int
    private let channel: any Channel

    private init(port: Int, channel: any Channel) {
        self.port = port
        self.channel = channel
    }

    static func start() async throws -> StalledWebSocketPeer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(UpgradeThenStall()) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return StalledWebSocketPeer(port: channel.localAddress?.port ?? 0, channel: channel)
    }

    func stop() async { try? await channel.close() }

    final class UpgradeThenStall: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private var request = ""

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            request += String(buffer: unwrapInboundIn(data))
            guard request.contains("\r\n\r\n") else { return }
            let key = request.split(separator: "\r\n").first { $0.lowercased().hasPrefix("sec-websocket-key:") }
                .map { String($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) } ?? ""
            let accept = WebSocketClientUpgrader<Void>.acceptValue(for: key)
            let response = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n"
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: response)), promise: nil)
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
    }
}
