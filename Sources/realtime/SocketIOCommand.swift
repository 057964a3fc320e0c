import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import SocketIOEngine

struct SocketIOCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "socketio",
        abstract: "Connect to a Socket.IO server, optionally emit one event, and print what the server sends.")

    @Argument(help: "http(s):// or ws(s):// URL of the server") var url: String
    @OptionGroup var connection: ConnectionOptions
    @Option(name: .long, help: "Where the server is mounted (its Engine.IO path).") var path: String = "/socket.io/"
    @Option(name: .long, help: "The namespace to join.") var namespace: String = "/"
    @Option(name: .long, help: "The auth payload, a JSON object.") var auth: String?
    @Option(name: .long, parsing: .upToNextOption, help: "EVENT [JSON-ARGUMENTS-ARRAY]: emit this event once connected.")
    var emit: [String] = []
    @Flag(name: .long, help: "Ask for an ack on --emit and print it.") var ack = false
    @Option(name: .long, help: "The ack timeout in seconds.") var ackTimeout: Double = 10
    @Option(name: .long, help: "Transports: polling, websocket, or both (polling then upgrade).") var transport: String = "both"
    @Option(name: .long, help: "Exit after this many seconds (default: run until interrupted).") var duration: Double?
    @Option(name: .long, help: "Once connected, give up after this many consecutive failed reconnects (default 3).")
    var reconnectAttempts: Int?
    @Option(name: .long, help: "Try a first connection that fails this many more times, as curl's --retry (default: exit at once, unless --reconnect-attempts is given).")
    var retry: Int?
    @Option(name: .long, help: "The server's Engine.IO protocol: 4 (socket.io 3.x and 4.x) or 3 (socket.io 2.x).") var eio: Int = 4

    func run() async throws {
        let command = self
        do {
            try await Interruption.run { try await command.session() }
        } catch let error as RealtimeError {
            printError("realtime socketio: \(error)")
            throw ExitCode.failure
        }
    }

    private func session() async throws {
        var configuration = SocketIOConfiguration()
        configuration.reconnectionAttempts = max(reconnectAttempts ?? 3, retry ?? 0)
        switch eio {
        case 3: configuration.version = .v2
        case 4: break
        default: throw ValidationError("--eio is 3 (socket.io 2.x servers) or 4 (socket.io 3.x and 4.x)")
        }
        switch transport {
        case "polling": configuration.engine.transports = [.polling]
        case "websocket": configuration.engine.transports = [.websocket]
        case "both": break
        default: throw ValidationError("--transport is polling, websocket or both")
        }
        configuration.engine.tls = connection.tls
        configuration.engine.headers = try connection.headers
        configuration.engine.connectTimeout = connection.connectTimeout
        configuration.engine.path = path
        configuration.runtime = connection.runtime
        let authValue = try auth.map { try JSONValue(parsing: $0) }
        let gaveUp = FirstConnectionWatch()
        let manager = SocketManager(url: url, configuration: configuration)
        let socket = manager.socket(forNamespace: namespace, auth: authValue.map { .value($0) })
        let json = connection.json
        socket.onAny { event in
            if event.event == SocketClientEvent.error.rawValue {
                gaveUp.record(event.arguments.first?.stringValue)
                printError("realtime socketio: error \(JSONValue.array(event.arguments).jsonString)")
            } else if json {
                say("{\"event\":\(JSONText.quote(event.event)),\"arguments\":\(JSONValue.array(event.arguments).jsonString)}")
            } else {
                say("\(event.event) \(JSONValue.array(event.arguments).jsonString)")
            }
        }
        // A first connection that fails ends the command, as curl does, unless retries were asked
        // for: the manager's reconnects before the first connection are cut short.
        let firstRetries = retry ?? reconnectAttempts ?? 0
        let states = manager.connectionState.updates()
        let watch = Task {
            if await gaveUp.watch(states, retries: firstRetries) == .gaveUp { manager.disconnect() }
        }
        defer { watch.cancel() }
        do {
            try await socket.connect(timeout: .seconds(30))
        } catch {
            if gaveUp.value {
                throw RealtimeError(
                    .connectFailed,
                    "could not connect to \(url) (\(FirstConnectionWatch.retries(firstRetries)))\(gaveUp.lastError.map { ": \($0)" } ?? "")")
            }
            throw error
        }
        printError("realtime socketio: connected to \(namespace) (sid \(socket.sid ?? "?"), transport \(manager.transport?.rawValue ?? "?"))")
        if let event = emit.first {
            let arguments = try emit.dropFirst().first.map { try JSONValue(parsing: $0) }?.arrayValue ?? []
            if ack {
                let reply = try await socket.emitWithAck(event, arguments: arguments, timeout: .milliseconds(Int64(ackTimeout * 1000)))
                say(json ? "{\"ack\":\(JSONValue.array(reply).jsonString)}" : "ack \(JSONValue.array(reply).jsonString)")
            } else {
                try socket.emit(event, arguments: arguments)
            }
        }
        if let duration {
            try await Task.sleep(for: .milliseconds(Int64(duration * 1000)))
        } else if emit.isEmpty || !ack {
            await manager.waitUntilStopped()
            if case .disconnected(let error?) = manager.connectionState.current { throw error }
        }
        manager.disconnect()
        await manager.waitUntilStopped()
    }
}
