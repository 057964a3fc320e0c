// realtime-bridge: forwards an SSE stream, a Socket.IO namespace and a SignalR hub to a Spreadbot
// path, with Prometheus metrics on /metrics. Configured by environment variables (see README.md);
// stops cleanly on SIGTERM or SIGINT.
import Foundation
import Logging
import RealtimeBridge
import ServiceLifecycle
import SpreadbotClient

let environment = ProcessInfo.processInfo.environment
/// One line to standard output, written at once (a pipe or a file sees it before the process ends).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
func setting(_ name: String) -> String {
    guard let value = environment[name], !value.isEmpty else {
        FileHandle.standardError.write(Data("realtime-bridge: set \(name) (see Examples/RealtimeBridge/README.md)\n".utf8))
        exit(64)
    }
    return value
}

var logger = Logger(label: "realtime-bridge")
logger.logLevel = environment["BRIDGE_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info

var spreadbot = SpreadbotConfiguration(
    baseURL: setting("BRIDGE_SPREADBOT_URL"), authURL: environment["BRIDGE_SPREADBOT_AUTH_URL"],
    accessToken: environment["BRIDGE_SPREADBOT_TOKEN"], refreshToken: environment["BRIDGE_SPREADBOT_REFRESH_TOKEN"],
    base64Credentials: environment["BRIDGE_SPREADBOT_CREDENTIALS"])
var configuration = BridgeConfiguration(
    eventStreamURL: URL(string: setting("BRIDGE_SSE_URL"))!, socketIOURL: setting("BRIDGE_SOCKETIO_URL"),
    signalRURL: setting("BRIDGE_SIGNALR_URL"), spreadbot: spreadbot)
if let namespace = environment["BRIDGE_SOCKETIO_NAMESPACE"] { configuration.socketIONamespace = namespace }
if let event = environment["BRIDGE_SOCKETIO_EVENT"] { configuration.socketIOEvent = event }
if let method = environment["BRIDGE_SIGNALR_METHOD"] { configuration.signalRMethod = method }
if let path = environment["BRIDGE_SPREADBOT_PATH"] { configuration.spreadbotPath = path }
if let port = environment["BRIDGE_METRICS_PORT"].flatMap(Int.init) { configuration.metricsPort = port }

let bridge = Bridge(configuration: configuration, logger: logger)
let group = ServiceGroup(configuration: .init(
    services: bridge.services.map { .init(service: $0) },
    gracefulShutdownSignals: [.sigterm, .sigint],
    logger: logger))
Task {
    let port = await bridge.metricsPort()
    say("realtime-bridge: metrics on http://\(configuration.metricsHost):\(port)/metrics")
}
do {
    try await group.run()
} catch {
    logger.error("realtime-bridge stopped", metadata: ["error": "\(error)"])
}
let counts = bridge.counts
say("realtime-bridge: accepted \(counts.accepted), delivered \(counts.delivered), failed \(counts.failed), unconfirmed \(counts.unconfirmed)")
exit(counts.unconfirmed == 0 && counts.failed == 0 ? 0 : 1)
